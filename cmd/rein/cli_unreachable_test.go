package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUnreachableServerSaysSo: a CLI that cannot talk to its --server says
// so in words: nothing listening (is rein serve running?), or a TLS server
// reached in plaintext (pass --tls-ca). The twin: the same TLS server with
// --tls-ca is reached. rein run, which retries an unavailable server, gives
// up on a TLS mismatch after a few tries.
func TestUnreachableServerSaysSo(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := lis.Addr().String()
	lis.Close()
	r := cli(t, "list", "--server", free).mustExit(t, exitUnavailable)
	mustContain(t, "list against nothing", r.stderr, "cannot reach a rein server at "+free, "is `rein serve` running")

	cert, key := selfSigned(t)
	addr := serveInProcess(t, newDB(t), "--tls-cert", cert, "--tls-key", key, "--tools", "fixture:"+writeFile(t, "tools.json", lookupFixtures))
	r = cli(t, "list", "--server", addr).mustExit(t, exitUnavailable)
	mustContain(t, "plaintext list against a TLS server", r.stderr, "pass --tls-ca")
	cli(t, "list", "--server", addr, "--tls-ca", cert).mustExit(t, exitOK)

	// rein run retries an unavailable server, but not a TLS mismatch, which
	// waiting does not fix: it says so well before its --command-timeout.
	done := make(chan result, 1)
	go func() {
		done <- cli(t, "run", writeFile(t, "task.json", lookupTask), "--model", "script:"+writeFile(t, "model.jsonl", `{"decision": {"final_answer": {"text": "x"}}}`+"\n"),
			"--server", addr, "--command-timeout", "10m")
	}()
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("plaintext rein run against a TLS server was still retrying after 2 minutes")
	}
	r.mustExit(t, exitUnavailable)
	mustContain(t, "plaintext run against a TLS server", r.stderr, "pass --tls-ca")
	cli(t, "run", writeFile(t, "task.json", lookupTask), "--model", "script:"+writeFile(t, "model.jsonl", `{"decision": {"final_answer": {"text": "x"}}}`+"\n"),
		"--server", addr, "--tls-ca", cert).mustExit(t, exitOK)
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rein test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
