package kernel

import (
	"path/filepath"
	"strings"
)

func sysctlPath(root, name string) string {
	return filepath.Join(root, "proc", "sys", strings.ReplaceAll(name, ".", "/"))
}

// ReadSysctl returns /proc/sys/NAME (dots or slashes) trimmed.
func ReadSysctl(root, name string) (string, error) {
	b, err := ReadFile(sysctlPath(root, name), MaxSmall)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteSysctl sets /proc/sys/NAME.
func WriteSysctl(root, name, value string) error {
	return WriteFile(filepath.Join(root, "proc"), sysctlPath(root, name), []byte(value+"\n"))
}
