package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// testCA issues certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rein test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: t.TempDir()}
	ca.write(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue makes a certificate for cn (a server's when server is true) and
// returns the paths of its certificate and key.
func (ca *testCA) issue(t *testing.T, cn string, server bool, serial int64) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, cn+".pem", "CERTIFICATE", der), ca.write(t, cn+"-key.pem", "EC PRIVATE KEY", kder)
}

// TestMTLSMapsCertificateToPrincipal: over mTLS a client certificate's
// common name maps to its principal, tenant and roles as a token does; an
// unmapped certificate is Unauthenticated, and a client without one does
// not get through the handshake.
func TestMTLSMapsCertificateToPrincipal(t *testing.T) {
	ca := newTestCA(t)
	srvCert, srvKey := ca.issue(t, "rein-server", true, 2)
	cliCert, cliKey := ca.issue(t, "billing-svc", false, 3)
	strangerCert, strangerKey := ca.issue(t, "stranger", false, 4)

	dir, err := auth.ParseDirectory([]byte(`{"principals": [
		{"id": "billing", "tenant": "acme", "roles": ["operator"], "cert_cn": "billing-svc"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	node, err := Open(context.Background(), Config{Store: tempBolt(t), Tools: fixtures(), Directory: dir,
		ServerOptions: []grpc.ServerOption{grpc.Creds(creds)}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = node.GRPC.Serve(lis) }()
	t.Cleanup(func() { node.Close(); <-served })
	addr := lis.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	dial := func(opts client.Options) reinv1.RunServiceClient {
		t.Helper()
		c, err := client.Dial(addr, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c.Runs
	}
	billing := dial(client.Options{CAFile: filepath.Join(ca.dir, "ca.pem"), CertFile: cliCert, KeyFile: cliKey})
	resp, err := billing.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "r", Contract: contract(nil, ask("which?"))})
	if err != nil {
		t.Fatalf("StartRun over mTLS: %v", err)
	}
	if run := resp.GetRun(); run.GetPrincipal() != "billing" || run.GetTenant() != "acme" {
		t.Fatalf("run started by %q in %q, want the certificate's principal billing in acme", run.GetPrincipal(), run.GetTenant())
	}

	stranger := dial(client.Options{CAFile: filepath.Join(ca.dir, "ca.pem"), CertFile: strangerCert, KeyFile: strangerKey})
	_, err = stranger.GetRun(ctx, &reinv1.GetRunRequest{RunId: resp.GetRun().GetRunId()})
	wantCode(t, err, codes.Unauthenticated)

	anonymous := dial(client.Options{CAFile: filepath.Join(ca.dir, "ca.pem")})
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if _, err := anonymous.GetRun(short, &reinv1.GetRunRequest{RunId: resp.GetRun().GetRunId()}); err == nil {
		t.Fatal("a client without a certificate got through an mTLS server")
	}
}
