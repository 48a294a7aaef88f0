// Package systemd talks to a node's systemd over its private D-Bus socket, as
// systemctl does as root: oomguard restarts a runtime through it when the
// operator allowed it. It is apart from package install so that programs
// that never restart anything (oomguard-hook) do not link D-Bus.
package systemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"
)

// systemdPrivate is systemd's own D-Bus socket: systemctl's way in as root,
// with no bus daemon needed.
const systemdPrivate = "/run/systemd/private"

// RestartUnit asks the node's systemd to restart unit, as `systemctl
// restart` does, and returns its job; root is the node's filesystem root,
// whose /run/systemd must be the node's.
func RestartUnit(root, unit string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "/run/systemd/system")); err != nil {
		return "", fmt.Errorf("the node does not run systemd (no %s): restart the runtime yourself", filepath.Join(root, "/run/systemd/system"))
	}
	sock := filepath.Join(root, systemdPrivate)
	conn, err := dbus.Dial("unix:path=" + sock)
	if err != nil {
		return "", fmt.Errorf("connect to systemd at %s (mount the node's /run/systemd there): %w", sock, err)
	}
	defer conn.Close()
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		return "", fmt.Errorf("authenticate to systemd at %s (install runs as root): %w", sock, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var job dbus.ObjectPath
	err = conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.systemd1.Manager.RestartUnit", 0, unit, "replace").Store(&job)
	if err != nil {
		return "", fmt.Errorf("systemd RestartUnit %s: %w", unit, err)
	}
	return string(job), nil
}
