package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/etcdtest"
)

var etcdReceivedRe = regexp.MustCompile(`(?m)^rein_etcd_received_bytes_total (\S+)$`)

// TestServeEtcdReceivedBytes: rein serve --etcd --admin-listen serves
// rein_etcd_received_bytes_total on /metrics, counting what its etcd
// client received (the store's open, its lease, its watches). The twin: a
// server on a bolt file has no etcd client, and no such metric.
func TestServeEtcdReceivedBytes(t *testing.T) {
	c := etcdtest.Start(t, 1)
	admin := freeAddr(t)
	serveInProcess(t, newDB(t), "--etcd", c.Endpoint(0), "--etcd-prefix", "/metrics-test/", "--admin-listen", admin)
	code, text := httpGet(t, "http://"+admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	m := etcdReceivedRe.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("/metrics of a server on etcd has no rein_etcd_received_bytes_total:\n%s", text)
	}
	if v, err := strconv.ParseFloat(m[1], 64); err != nil || v <= 0 {
		t.Fatalf("rein_etcd_received_bytes_total = %s; want the bytes its etcd client received, more than 0", m[1])
	}

	bolt := freeAddr(t)
	serveInProcess(t, newDB(t), "--admin-listen", bolt)
	if code, text := httpGet(t, "http://"+bolt+"/metrics"); code != 200 || strings.Contains(text, "rein_etcd_received_bytes_total") {
		t.Fatalf("/metrics of a server on a bolt file: %d, with rein_etcd_received_bytes_total %v; want 200 without it", code, strings.Contains(text, "rein_etcd_received_bytes_total"))
	}
}
