package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/policy"
)

// policyFlags are rein serve's policy flags: the server's rules file
// (--policy, read at start and again on SIGHUP) and the policy services
// grants may name.
type policyFlags struct {
	path     string
	services []string
	timeout  time.Duration
	fail     string
}

func (p *policyFlags) register(f *pflag.FlagSet) {
	f.StringVar(&p.path, "policy", "", "the server's policy rules (TOML, mode 0600): [[rules]] with name, tenants, tools, effect (allow, ask, deny), when (CEL) and message, decided before each contract's own rules, which can only tighten them; SIGHUP reloads it, a file that does not compile keeping the previous rules")
	f.StringArrayVar(&p.services, "policy-service", nil, "a policy service (rein.v1.PolicyService) as NAME=HOST:PORT, asked about each call to a tool whose grant names it (policy_service); repeatable")
	f.DurationVar(&p.timeout, "policy-timeout", policy.DefaultServiceTimeout, "how long a policy service may take to answer before the call fails closed (see --policy-fail)")
	f.StringVar(&p.fail, "policy-fail", "ask", "what a call gets when its policy service fails or does not answer in time: ask (a person decides) or deny; never allow")
}

// load reads the flags into a policy.Checker. With --policy it reloads the
// file on each SIGHUP, logging what it holds, or why it was refused and
// that the previous rules stay, until ctx ends or stop is called.
func (p *policyFlags) load(ctx context.Context, log *slog.Logger) (c *policy.Checker, stop func(), err error) {
	if p.fail != "ask" && p.fail != "deny" {
		return nil, nil, usageError("--policy-fail %q: give ask or deny (a failed policy service never allows a call)", p.fail)
	}
	if p.timeout <= 0 {
		return nil, nil, usageError("--policy-timeout %s: give a positive duration, such as 2s", p.timeout)
	}
	holder, err := policy.NewHolder(p.path)
	if err != nil {
		return nil, nil, usageError("--policy: %v", err)
	}
	services := policy.NewServices(p.timeout, p.fail == "deny")
	for _, s := range p.services {
		name, addr, ok := strings.Cut(s, "=")
		if !ok || name == "" || addr == "" {
			services.Close()
			return nil, nil, usageError("--policy-service %q: give NAME=HOST:PORT", s)
		}
		if err := services.Dial(name, addr); err != nil {
			services.Close()
			return nil, nil, usageError("--policy-service: %v", err)
		}
	}
	c = &policy.Checker{Server: holder, Services: services}
	if p.path == "" {
		return c, func() { services.Close() }, nil
	}
	log.Info("policy rules loaded", "file", p.path, "rules", holder.Current().Len())
	stopHangup := onHangup(ctx, func() {
		s, err := holder.Reload()
		if err != nil {
			log.Error("policy rules not reloaded; keeping the previous rules", "file", p.path, "error", err)
			return
		}
		log.Info("policy rules reloaded", "file", p.path, "rules", s.Len())
	})
	return c, func() { stopHangup(); services.Close() }, nil
}
