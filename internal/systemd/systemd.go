// Package systemd talks to a node's systemd over its private D-Bus socket, as
// systemctl does as root: oomguard restarts a runtime through it when the
// operator allowed it, waits for the job's end and says how it ended. It is
// apart from package install so that programs that never restart anything
// (oomguard-hook) do not link D-Bus.
package systemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// systemdPrivate is systemd's own D-Bus socket: systemctl's way in as root,
// with no bus daemon needed; systemd sends every job's end to each
// connection on it.
const systemdPrivate = "/run/systemd/private"

// JobTimeout bounds a restart: systemd's own default stop and start
// timeouts are 90 s each.
const JobTimeout = 200 * time.Second

// RestartUnit asks the node's systemd to restart unit, as `systemctl
// restart` does, and waits for the job to end: an error says how it ended
// when it did not succeed. root is the node's filesystem root, whose
// /run/systemd must be the node's.
func RestartUnit(root, unit string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), JobTimeout)
	defer cancel()
	return restart(ctx, root, unit)
}

func restart(ctx context.Context, root, unit string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "/run/systemd/system")); err != nil {
		return "", fmt.Errorf("the node does not run systemd (no %s): restart the runtime yourself", filepath.Join(root, "/run/systemd/system"))
	}
	sock := filepath.Join(root, systemdPrivate)
	conn, err := sd.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path="+sock, dbus.WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("connect to systemd at %s (mount the node's /run/systemd there): %w", sock, err)
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, fmt.Errorf("authenticate to systemd at %s (run as root, in the node's PID namespace): %w", sock, err)
		}
		return c, nil
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	done := make(chan string, 1)
	id, err := conn.RestartUnitContext(ctx, unit, "replace", done)
	if err != nil {
		return "", fmt.Errorf("systemd RestartUnit %s: %w", unit, err)
	}
	job := fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id)
	select {
	case result := <-done:
		if result == "done" {
			return job, nil
		}
		return job, fmt.Errorf("systemd's job %d restarting %s ended %q (%s): see journalctl -u %s on the node",
			id, unit, result, unitState(conn, unit), unit)
	case <-ctx.Done():
		return job, fmt.Errorf("systemd's job %d restarting %s did not end in %s (%s): see systemctl status %s on the node",
			id, unit, JobTimeout, unitState(conn, unit), unit)
	}
}

// unitState is what systemctl status shows first: the active state, its
// sub-state and, for a service, the result of its last run.
func unitState(conn *sd.Conn, unit string) string {
	state := func(iface, prop string) string {
		p, err := conn.GetUnitTypePropertyContext(context.Background(), unit, iface, prop)
		if err != nil {
			return "?"
		}
		s, _ := p.Value.Value().(string)
		return s
	}
	return fmt.Sprintf("now %s/%s, result %s", state("Unit", "ActiveState"), state("Unit", "SubState"), state("Service", "Result"))
}
