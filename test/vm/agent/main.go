// Command agent runs in the VM of the cluster scenarios, where the test on
// the build host drives a node: it runs the shell scripts the test sends
// (with the VM's helpers, /lib/oomguard-vm.sh, sourced) and answers with
// their output and exit status. It listens on the VM's private network only,
// answers only requests bearing the boot's token, and exits when told to.
package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

const (
	maxScript = 1 << 20
	maxOutput = 16 << 20
)

// Result is what a script did.
type Result struct {
	Output string `json:"output"` // stdout and stderr, interleaved
	Code   int    `json:"code"`   // its exit status; -1 when it was killed at its timeout
}

func main() {
	listen := flag.String("listen", "10.0.2.15:7070", "address to listen on")
	tokenFile := flag.String("token", "/etc/oomguard-vm/agent-token", "file holding the token requests must bear")
	flag.Parse()
	token, err := os.ReadFile(*tokenFile)
	if err != nil || len(bytes.TrimSpace(token)) < 16 {
		fmt.Fprintln(os.Stderr, "agent: no token:", err)
		os.Exit(1)
	}
	want := "Bearer " + string(bytes.TrimSpace(token))
	done := make(chan struct{})
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("POST /run", func(w http.ResponseWriter, r *http.Request) {
		script, err := io.ReadAll(io.LimitReader(r.Body, maxScript+1))
		if err != nil || len(script) > maxScript {
			http.Error(w, "script too large or unreadable", http.StatusBadRequest)
			return
		}
		timeout, _ := strconv.Atoi(r.URL.Query().Get("timeout"))
		if timeout <= 0 {
			timeout = 300
		}
		json.NewEncoder(w).Encode(run(r.Context(), string(script), time.Duration(timeout)*time.Second))
	})
	mux.HandleFunc("POST /done", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		once.Do(func() { close(done) })
	})
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})}
	go func() {
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()
	fmt.Println("@@AGENT listening on", *listen)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// limited keeps the first n bytes written to it.
type limited struct {
	mu  sync.Mutex
	buf bytes.Buffer
	n   int
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func run(ctx context.Context, script string, timeout time.Duration) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", ". /lib/oomguard-vm.sh\n"+script)
	out := &limited{n: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second // a background child holding the output must not hold the answer
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if ctx.Err() != nil {
		code = -1
		fmt.Fprintf(out, "\nagent: killed after %s\n", timeout)
	} else if err != nil && code == 0 {
		code = 1
		fmt.Fprintf(out, "\nagent: %v\n", err)
	}
	return Result{Output: out.buf.String(), Code: code}
}
