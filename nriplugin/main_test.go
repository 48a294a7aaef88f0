package nriplugin

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel) // NRI's runtime side chatters at info on every connection
	os.Exit(m.Run())
}
