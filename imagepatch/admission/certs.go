package admission

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// keyPair is the webhook's TLS material as its Secret holds it (PEM): the
// CA bundle the API server trusts (newest first, the previous one kept
// until it expires), the newest CA's key, the serving pair it signed.
type keyPair struct {
	Bundle, CAKey, Cert, Key []byte
}

// Secret keys; tls.crt and tls.key are a kubernetes.io/tls Secret's.
const (
	keyBundle = "ca.crt"
	keyCAKey  = "ca.key"
	keyCert   = "tls.crt"
	keyKey    = "tls.key"
)

// caLifetimes is how many serving certificates' lifetimes a CA lives: the
// API server's bundle changes ten times less often than the serving pair.
const caLifetimes = 10

// renew returns kp with whatever is missing, broken, naming other hosts or
// in the last third of its life made anew, and why; kp itself if nothing is.
// A new CA keeps the previous one in the bundle, and the serving pair the
// previous CA signed is kept while it is good: an API server that has not
// seen the new bundle yet (informers, other API servers) still trusts what
// is served, and a later check issues the pair from the new CA.
func renew(kp keyPair, hosts []string, validity time.Duration, now time.Time) (keyPair, string, error) {
	ca, caKey, caErr := parseCA(kp)
	why := ""
	switch {
	case caErr != nil:
		why = "no usable CA: " + caErr.Error()
	case ca.NotAfter.Sub(now) < 2*validity:
		why = "the CA expires " + ca.NotAfter.UTC().Format(time.RFC3339)
	}
	if why != "" {
		prev := kp
		var err error
		ca, caKey, kp, err = newCA(kp, validity, now)
		if err != nil {
			return kp, "", err
		}
		if caErr == nil && servingStale(prev, hosts, now) == "" {
			kp.Cert, kp.Key = prev.Cert, prev.Key
			return kp, why, nil
		}
	} else if reason := servingStale(kp, hosts, now); reason != "" {
		why = reason
	} else {
		return kp, "", nil
	}
	cert, key, err := issue(ca, caKey, hosts, validity, now)
	if err != nil {
		return kp, "", err
	}
	kp.Cert, kp.Key = cert, key
	return kp, why, nil
}

// servingStale says why kp's serving pair needs making again, or "": it
// must be signed by a CA of the bundle that is still valid.
func servingStale(kp keyPair, hosts []string, now time.Time) string {
	pair, err := tls.X509KeyPair(kp.Cert, kp.Key)
	if err != nil {
		return "no usable serving pair: " + err.Error()
	}
	c := pair.Leaf
	signed := slices.ContainsFunc(parseBundle(kp.Bundle), func(ca *x509.Certificate) bool {
		return now.Before(ca.NotAfter) && c.CheckSignatureFrom(ca) == nil
	})
	switch {
	case !signed:
		return "the serving certificate is not a CA's of the bundle"
	case !slices.Equal(certHosts(c), sortedHosts(hosts)):
		return fmt.Sprintf("the serving certificate names %v, not %v", certHosts(c), sortedHosts(hosts))
	case c.NotAfter.Sub(now) < c.NotAfter.Sub(c.NotBefore)/3:
		return "the serving certificate expires " + c.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// parseBundle is every certificate of a PEM bundle, newest CA first.
func parseBundle(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var p *pem.Block
		if p, b = pem.Decode(b); p == nil {
			return out
		}
		if c, err := x509.ParseCertificate(p.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func parseCA(kp keyPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(kp.Bundle)
	if b == nil {
		return nil, nil, errors.New("no certificate")
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, _ := pem.Decode(kp.CAKey)
	if k == nil {
		return nil, nil, errors.New("no key")
	}
	key, err := x509.ParseECPrivateKey(k.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the key is not the certificate's")
	}
	return ca, key, nil
}

// newCA makes a CA living caLifetimes×validity; the bundle keeps the
// previous CA while it is valid.
func newCA(kp keyPair, validity time.Duration, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, kp, err
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "oomguard-imagepatch-webhook-ca"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := sign(tmpl, nil, key, &key.PublicKey, caLifetimes*validity, now)
	if err != nil {
		return nil, nil, kp, err
	}
	ca, _ := x509.ParseCertificate(der)
	bundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if b, _ := pem.Decode(kp.Bundle); b != nil {
		if prev, err := x509.ParseCertificate(b.Bytes); err == nil && now.Before(prev.NotAfter) {
			bundle = append(bundle, pem.EncodeToMemory(b)...)
		}
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, kp, err
	}
	return ca, key, keyPair{Bundle: bundle, CAKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}, nil
}

// issue makes a serving pair for hosts (DNS names or IP addresses).
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, hosts []string, validity time.Duration, now time.Time) (cert, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: hosts[0]},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := sign(tmpl, ca, caKey, &k.PublicKey, validity, now)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// sign signs tmpl (by itself if parent is nil), valid from a little before
// now (clocks differ) for validity.
func sign(tmpl, parent *x509.Certificate, signer *ecdsa.PrivateKey, pub *ecdsa.PublicKey, validity time.Duration, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-min(validity/10, 5*time.Minute))
	tmpl.NotAfter = now.Add(validity)
	if parent == nil {
		parent = tmpl
	}
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func certHosts(c *x509.Certificate) []string {
	h := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		h = append(h, ip.String())
	}
	slices.Sort(h)
	return h
}

func sortedHosts(hosts []string) []string {
	h := make([]string, len(hosts))
	for i, s := range hosts {
		if ip := net.ParseIP(s); ip != nil {
			s = ip.String()
		}
		h[i] = s
	}
	slices.Sort(h)
	return slices.Compact(h)
}

// sameBundle says whether two PEM bundles hold the same certificates.
func sameBundle(a, b []byte) bool {
	return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b))
}
