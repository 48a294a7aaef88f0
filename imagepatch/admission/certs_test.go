package admission

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

func TestRenew(t *testing.T) {
	const validity = 30 * 24 * time.Hour
	hosts := []string{"hook.oomguard.svc", "127.0.0.1"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fresh, why, err := renew(keyPair{}, hosts, validity, t0)
	if err != nil || !strings.HasPrefix(why, "no usable CA") {
		t.Fatalf("from nothing: %q %v", why, err)
	}
	serial := func(kp keyPair) string {
		p, err := tls.X509KeyPair(kp.Cert, kp.Key)
		if err != nil {
			t.Fatal(err)
		}
		return p.Leaf.SerialNumber.String()
	}
	broken := fresh
	other, _, _ := renew(keyPair{}, hosts, validity, t0)
	broken.CAKey = fresh.Key
	for _, tc := range []struct {
		name       string
		kp         keyPair
		hosts      []string
		at         time.Time
		why        string // prefix; "" nothing renewed
		newCA      bool
		bundleSize int
		keepsPair  bool // the previous CA's pair, still served: the API server may not trust the new CA yet
	}{
		{"fresh", fresh, hosts, t0.Add(time.Hour), "", false, 1, false},
		{"hosts in another order", fresh, []string{"127.0.0.1", "hook.oomguard.svc"}, t0, "", false, 1, false},
		{"two thirds of its life", fresh, hosts, t0.Add(validity * 2 / 3).Add(time.Hour), "the serving certificate expires", false, 1, false},
		{"other hosts", fresh, []string{"hook.other.svc"}, t0, "the serving certificate names", false, 1, false},
		{"a serving pair of another CA", keyPair{Bundle: fresh.Bundle, CAKey: fresh.CAKey, Cert: other.Cert, Key: other.Key}, hosts, t0, "the serving certificate is not a CA's of the bundle", false, 1, false},
		{"a serving pair that is not one", keyPair{Bundle: fresh.Bundle, CAKey: fresh.CAKey, Cert: fresh.Cert, Key: other.Key}, hosts, t0, "no usable serving pair", false, 1, false},
		{"the CA's key is another's", broken, hosts, t0, "no usable CA", true, 2, false},
		{"the CA near its end, its pair good", renewedAt(t, fresh, hosts, validity, t0.Add(caLifetimes*validity-2*validity)), hosts, t0.Add(caLifetimes*validity - 2*validity + time.Hour),
			"the CA expires", true, 2, true},
		{"the CA near its end, its pair at its end", fresh, hosts, t0.Add(caLifetimes*validity - validity), "the CA expires", true, 2, false},
		{"the CA expired", fresh, hosts, t0.Add(caLifetimes * validity).Add(time.Hour), "the CA expires", true, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := renew(tc.kp, tc.hosts, validity, tc.at)
			if err != nil || !strings.HasPrefix(why, tc.why) || (tc.why == "") != (why == "") {
				t.Fatalf("why %q, %v; want %q", why, err, tc.why)
			}
			if tc.why == "" {
				if serial(got) != serial(tc.kp) {
					t.Fatal("renewed what needed nothing")
				}
				return
			}
			if (string(got.CAKey) != string(tc.kp.CAKey)) != tc.newCA {
				t.Fatalf("new CA: %v, want %v", string(got.CAKey) != string(tc.kp.CAKey), tc.newCA)
			}
			var bundle []*x509.Certificate
			for rest := got.Bundle; ; {
				var b *pem.Block
				if b, rest = pem.Decode(rest); b == nil {
					break
				}
				c, _ := x509.ParseCertificate(b.Bytes)
				bundle = append(bundle, c)
			}
			if len(bundle) != tc.bundleSize {
				t.Fatalf("bundle of %d, want %d", len(bundle), tc.bundleSize)
			}
			pair, err := tls.X509KeyPair(got.Cert, got.Key)
			if err != nil {
				t.Fatal(err)
			}
			if kept := string(got.Cert) == string(tc.kp.Cert); kept != tc.keepsPair {
				t.Fatalf("kept the serving pair: %v, want %v", kept, tc.keepsPair)
			}
			if signedByNewest := pair.Leaf.CheckSignatureFrom(bundle[0]) == nil; signedByNewest == tc.keepsPair {
				t.Fatalf("the pair signed by the newest CA: %v", signedByNewest)
			}
			roots := x509.NewCertPool() // what the API server trusts: the whole bundle
			for _, c := range bundle {
				roots.AddCert(c)
			}
			if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.hosts[0], CurrentTime: tc.at}); err != nil {
				t.Fatalf("the pair does not verify against the bundle: %v", err)
			}
			if again, why, _ := renew(got, tc.hosts, validity, tc.at); why != "" || serial(again) != serial(got) {
				t.Fatalf("renewed again at once: %q", why)
			}
			if tc.keepsPair { // its last third, later: from the new CA
				later := pair.Leaf.NotAfter.Add(-time.Hour)
				next, why, _ := renew(got, tc.hosts, validity, later)
				p, _ := tls.X509KeyPair(next.Cert, next.Key)
				if !strings.HasPrefix(why, "the serving certificate expires") || p.Leaf.CheckSignatureFrom(bundle[0]) != nil {
					t.Fatalf("the kept pair at its end: %q, want a pair from the new CA", why)
				}
			}
		})
	}
}

// renewedAt is kp as the webhook keeps it at at: its serving pair renewed.
func renewedAt(t *testing.T, kp keyPair, hosts []string, validity time.Duration, at time.Time) keyPair {
	t.Helper()
	kp, why, err := renew(kp, hosts, validity, at)
	if err != nil || why == "" {
		t.Fatalf("renew at %s: %q %v", at, why, err)
	}
	return kp
}
