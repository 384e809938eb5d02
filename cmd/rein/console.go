package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/reinhq/rein/internal/console"
)

// serveConsole serves the web console and RunService for browsers on lis
// (rein serve --http), over TLS when tlsCfg is set (its client certificates
// name principals as on the gRPC port). Calls go through g, so its
// interceptors judge them. stop closes the listener and every connection;
// watch streams end, and the console resumes them when the server is back.
func serveConsole(lis net.Listener, g *grpc.Server, tlsCfg *tls.Config, log *slog.Logger) (stop func(), err error) {
	h, err := console.Handler(g)
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, Protocols: &p}
	scheme := "http"
	if tlsCfg != nil {
		hs.TLSConfig = tlsCfg.Clone()
		scheme = "https"
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	go func() {
		var err error
		if tlsCfg != nil {
			err = hs.ServeTLS(lis, "", "")
		} else {
			err = hs.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("web console HTTP server stopped", "error", err)
		}
	}()
	log.Info("serving the web console", "http_addr", lis.Addr().String(), "url", fmt.Sprintf("%s://%s/", scheme, lis.Addr()))
	return func() { hs.Close() }, nil
}
