package adapters_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
)

func TestCheckIdentity(t *testing.T) {
	long := strings.Repeat("x", 1024) // the longest namespace or id accepted
	for _, tc := range []struct {
		ev      adapters.Event
		refused string // what the error says; "" for an accepted identity
	}{
		{adapters.Event{Namespace: "orders", ID: "42"}, ""},
		{adapters.Event{Namespace: "", ID: "42"}, ""},
		{adapters.Event{Namespace: long, ID: long}, ""},
		{adapters.Event{Namespace: "orders", ID: "ü/名"}, ""},
		{adapters.Event{Namespace: "orders", ID: ""}, "empty id"},
		{adapters.Event{Namespace: "orders", ID: long + "x"}, "at most 1024 bytes"},
		{adapters.Event{Namespace: long + "x", ID: "1"}, "at most 1024 bytes"},
		{adapters.Event{Namespace: "orders", ID: "x\xff"}, "not valid UTF-8"},
		{adapters.Event{Namespace: "\xfe", ID: "1"}, "not valid UTF-8"},
		{adapters.Event{Namespace: "orders", ID: "a\x00b"}, "NUL"},
		{adapters.Event{Namespace: "orders\x00", ID: "1"}, "NUL"},
	} {
		err := adapters.CheckIdentity(tc.ev)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("CheckIdentity(%s) = %v; want it accepted", tc.ev, err)
		case tc.refused != "" && (!errors.Is(err, adapters.ErrInvalidInput) || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("CheckIdentity(%s) = %v; want an error wrapping ErrInvalidInput that says %q", tc.ev, err, tc.refused)
		case err != nil && len(err.Error()) > 300:
			t.Errorf("CheckIdentity(%s) quotes the whole identity: %d bytes", tc.ev, len(err.Error()))
		}
	}
}
