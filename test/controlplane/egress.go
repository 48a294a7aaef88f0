package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The API server reaches the cluster's network (a webhook's Service, which
// --enable-aggregator-routing resolves to its endpoints) through an HTTP
// CONNECT proxy on a unix socket, as managed control planes reach their
// nodes through Konnectivity: here the proxy dials with Options.Reach,
// which knows how the host gets to a node in a VM.

// egressConfig is kube-apiserver's --egress-selector-config-file: only the
// cluster's traffic goes through the proxy.
const egressConfig = `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`

type egressProxy struct {
	l     net.Listener
	dir   string
	reach func(ctx context.Context, addr string) (net.Conn, error)
	wg    sync.WaitGroup
}

// startEgress listens on a socket in a short directory of its own (a unix
// socket's path has 107 bytes at most) and writes the API server's egress
// configuration into dir.
func startEgress(dir string, reach func(ctx context.Context, addr string) (net.Conn, error)) (*egressProxy, string, error) {
	sockDir, err := os.MkdirTemp("", "cp-egress-")
	if err != nil {
		return nil, "", err
	}
	sock := filepath.Join(sockDir, "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, "", err
	}
	cfg := filepath.Join(dir, "egress-selector.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, egressConfig, sock), 0o600); err != nil {
		l.Close()
		os.RemoveAll(sockDir)
		return nil, "", err
	}
	p := &egressProxy{l: l, dir: sockDir, reach: reach}
	p.wg.Add(1)
	go p.serve()
	return p, cfg, nil
}

func (p *egressProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.tunnel(c)
	}
}

// tunnel answers one CONNECT and copies both ways until either side ends.
func (p *egressProxy) tunnel(c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		fmt.Fprint(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := p.reach(ctx, req.Host)
	cancel()
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n%s", len(err.Error()), err)
		return
	}
	defer up.Close()
	c.SetReadDeadline(time.Time{})
	fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); closeWrite(up); done <- struct{}{} }()
	go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

func (p *egressProxy) stop() {
	p.l.Close()
	p.wg.Wait()
	os.RemoveAll(p.dir)
}
