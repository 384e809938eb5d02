package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pemFile writes one PEM block to dir/name.
func pemFile(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testPKI makes a CA, a server certificate for 127.0.0.1 and a client
// certificate for cn, and returns their files.
func testPKI(t *testing.T, cn string) (caFile, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rein console test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(name string, serial int64, server bool) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return pemFile(t, dir, name+".pem", "CERTIFICATE", der), pemFile(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	caFile = pemFile(t, dir, "ca.pem", "CERTIFICATE", caDER)
	serverCert, serverKey = issue("rein-server", 2, true)
	clientCert, clientKey = issue(cn, 3, false)
	return
}

// TestServeHTTPConsoleMTLS: with --client-ca, the console's port is served
// over TLS too, and the browser's certificate names the principal, with no
// token; a browser without a certificate does not get through.
func TestServeHTTPConsoleMTLS(t *testing.T) {
	caFile, srvCert, srvKey, cliCert, cliKey := testPKI(t, "reviewer.internal")
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"principals": [{"id": "rita", "tenant": "acme", "roles": ["approver"], "cert_cn": "reviewer.internal"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	serveInProcess(t, newDB(t), "--tls-cert", srvCert, "--tls-key", srvKey, "--client-ca", caFile, "--tokens", tokens, "--http", web)

	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	call := func(certs []tls.Certificate) (string, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}}
		req, _ := http.NewRequest(http.MethodPost, "https://"+web+"/rein.v1.RunService/GetServerInfo", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b), nil
	}
	got, err := call([]tls.Certificate{pair})
	if err != nil || !strings.HasPrefix(got, "200") || !strings.Contains(got, `"principal":"rita"`) || !strings.Contains(got, `"approver"`) {
		t.Fatalf("with the reviewer's certificate: %s, %v; want rita, approver", got, err)
	}
	if got, err := call(nil); err == nil {
		t.Fatalf("without a certificate: %s; want the TLS handshake refused", got)
	}
}
