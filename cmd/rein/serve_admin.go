package main

import (
	"github.com/reinhq/rein/internal/hostcheck"
)

// adminSite is the Host and Origin rule of the --admin-listen port, the
// one every HTTP listener of rein applies: it answers to IP addresses,
// localhost, the host of the --admin-listen address and the --admin-host
// names, from its own origin alone.
func (o *serveOptions) adminSite() (hostcheck.Rule, error) {
	if o.adminListen == "" && o.flags.Changed("admin-host") {
		return hostcheck.Rule{}, usageError("--admin-host is for the admin port: give --admin-listen ADDR too")
	}
	site, err := hostcheck.New(hostcheck.Options{Listen: o.adminListen, Hosts: o.adminHosts, HostFlag: "--admin-host"})
	if err != nil {
		return hostcheck.Rule{}, usageError("%v", err)
	}
	return site, nil
}
