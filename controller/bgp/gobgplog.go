package bgp

import (
	"context"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"

	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// gobgpLog receives GoBGP's log records. NOTIFICATION messages, which
// GoBGP reports only in its log (a refused OPEN leaves the session state
// unchanged), go to the speaker; GoBGP's warnings and errors pass through,
// its routine messages are demoted to debug.
type gobgpLog struct {
	next  slog.Handler
	s     *Speaker
	attrs []slog.Attr
}

func (h *gobgpLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *gobgpLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &gobgpLog{next: h.next.WithAttrs(as), s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *gobgpLog) WithGroup(name string) slog.Handler {
	return &gobgpLog{next: h.next.WithGroup(name), s: h.s, attrs: h.attrs}
}

func (h *gobgpLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "sent notification" || r.Message == "received notification" {
		var key string
		var code, sub int64
		var said string
		visit := func(a slog.Attr) bool {
			switch a.Key {
			case "Key":
				key = a.Value.String()
			case "Code":
				code = a.Value.Int64()
			case "Subcode":
				sub = a.Value.Int64()
			case "Communicated-Reason":
				said = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			visit(a)
		}
		r.Attrs(visit)
		if peer, err := netip.ParseAddr(key); err == nil {
			h.s.onNotification(peer, r.Message == "sent notification", uint8(code), uint8(sub), said)
		}
	}
	if r.Level < slog.LevelWarn {
		r.Level = slog.LevelDebug
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

var notifRe = regexp.MustCompile(`^code \d+\(([^)]*)\) subcode \d+\(([^)]*)\)$`)

// notificationName is a NOTIFICATION's error as a label: its subcode's
// name ("bad-peer-as"), or its code's when the subcode is unspecific.
func notificationName(code, sub uint8) string {
	s := bgppkt.NewNotificationErrorCode(code, sub).String()
	m := notifRe.FindStringSubmatch(s)
	if m == nil {
		return strings.ReplaceAll(s, " ", "-")
	}
	name := m[2]
	if sub == 0 || name == "undefined" || strings.HasPrefix(name, "unknown") {
		name = m[1]
	}
	return strings.ReplaceAll(name, " ", "-")
}
