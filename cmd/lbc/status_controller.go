package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/urfave/cli/v2"
)

// controllerStatusFlag makes `lbc status` read a running `lbc run` instead
// of a datapath.
var controllerStatusFlag = &cli.StringFlag{
	Name:  "controller",
	Usage: "read the live view of a running lbc run at `ADDR`, the address of its --metrics (decision, eligible backends with health, weight and ring share, last push and digest per target)",
}

// controllerStatus prints the status a running controller serves.
func controllerStatus(c *cli.Context, addr string) error {
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + addr
	}
	url = strings.TrimSuffix(url, "/") + controller.StatusPath
	ctx, cancel := context.WithTimeout(c.Context, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("--controller %s: %w (is lbc run started with --metrics %s?)", addr, err, addr)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("--controller %s: %s", addr, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if c.String("format") == "json" {
		_, err := c.App.Writer.Write(data)
		return err
	}
	var st controller.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("--controller %s: %w", addr, err)
	}
	writeControllerStatus(c.App.Writer, st)
	return nil
}

func writeControllerStatus(w io.Writer, st controller.Status) {
	fmt.Fprintf(w, "controller: config %s", st.Config)
	if !st.Ready {
		fmt.Fprint(w, " (starting)")
	}
	fmt.Fprintln(w)
	if st.ReloadError != "" {
		fmt.Fprintf(w, "LAST RELOAD REJECTED (the previous configuration serves):\n  %s\n", strings.ReplaceAll(st.ReloadError, "\n", "\n  "))
	}
	if st.CompileError != "" {
		fmt.Fprintf(w, "COMPILE FAILED: %s\n", st.CompileError)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "\nTARGET\tROLE\tDIGEST\tPUSHES\tWRITES\tLAST PUSH\tSTATE")
	for _, t := range st.Targets {
		role := "primary"
		if !t.Primary {
			role = "backup"
		}
		state := "ok"
		switch {
		case t.LastError != "":
			state = "ERROR: " + t.LastError
		case t.Diverged:
			state = "DIVERGED"
		}
		last := "-"
		if !t.LastPush.IsZero() {
			last = fmt.Sprintf("%s (%d writes, %.1f ms)", t.LastPush.Local().Format(time.TimeOnly), t.LastPushWrites, t.LastPushSeconds*1e3)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", t.Name, role, t.Digest, t.Pushes, t.TotalWrites, last, state)
	}
	tw.Flush()
	if !st.DigestsAgree {
		fmt.Fprintln(w, "WARNING: targets hold different tables; flows rehashed by ECMP may change backend")
	}
	writeAnnounceStatus(w, st.Announce)
	writeFleetStatus(w, st.Fleet)
	for _, s := range st.Services {
		fmt.Fprintf(w, "\nservice %s: %s (%s), epoch %d, eligible: %s\n", s.Name, s.Decision, s.Rule, s.Epoch, s.EligibleList())
		if s.NoBackends {
			fmt.Fprintln(w, "  NO BACKENDS: new connections are dropped")
		}
		if s.Counters != nil {
			sessions := "not counted by this datapath"
			if s.Counters.HasSessions {
				sessions = fmt.Sprint(s.Counters.Sessions)
			}
			fmt.Fprintf(w, "  packets %d, bytes %d, new connections %d, sessions %s\n", s.Counters.Packets, s.Counters.Bytes, s.Counters.NewConnections, sessions)
		}
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  BACKEND\tIP\tHEALTH\tWEIGHT\tRING\tNEW CONNS\tLAST PROBE")
		bs := append([]controller.BackendStatus(nil), s.Backends...)
		sort.SliceStable(bs, func(i, j int) bool { return !bs[i].Failover && bs[j].Failover })
		for _, b := range bs {
			h := "healthy"
			if !b.Healthy {
				h = "UNHEALTHY"
			}
			if b.Failover {
				h += " (failover)"
			}
			if b.Draining {
				h += fmt.Sprintf(" draining until %s", b.DrainDeadline.Local().Format(time.TimeOnly))
			} else if !b.Deadline.IsZero() {
				h += fmt.Sprintf(" entries valid until %s (%s)", b.Deadline.Local().Format(time.TimeOnly), b.DeadlineRule)
			}
			conns := "-"
			if b.Counters != nil {
				conns = fmt.Sprint(b.Counters.NewConnections)
			}
			probe := "-"
			if !b.LastProbe.IsZero() {
				probe = b.LastProbe.Local().Format(time.TimeOnly)
			}
			if b.LastError != "" {
				probe += ": " + b.LastError
			}
			if b.Note != "" {
				probe += " [" + b.Note + "]"
			}
			weight := "-" // unweighted service
			if b.Weight != nil {
				weight = fmt.Sprint(*b.Weight)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%.1f%%\t%s\t%s\n", b.Name, b.IP, h, weight, b.RingShare*100, conns, probe)
		}
		tw.Flush()
	}
	if n := len(st.Events); n > 0 {
		fmt.Fprintln(w, "\nrecent events:")
		for _, e := range st.Events[max(0, n-10):] {
			fmt.Fprintf(w, "  %s  %s\n", e.At.Local().Format(time.TimeOnly), e.Event)
		}
	}
}
