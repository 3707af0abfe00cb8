package egressproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseRules(t *testing.T) {
	rs, err := ParseRules(json.RawMessage(`{"API.Test.":[{"methods":["get"],"path":"/repos/*","transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.GH}"},"query":{"k":"${e2b.secrets.other}"}}}],"b.test":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Domains(); !reflect.DeepEqual(got, []string{"api.test"}) {
		t.Fatalf("domains %v", got)
	}
	if got := rs.SecretNames(); !reflect.DeepEqual(got, []string{"gh", "other"}) {
		t.Fatalf("secret names %v", got)
	}
	if m := rs.Match("api.test", "GET", "/repos/x"); len(m) != 1 {
		t.Fatal("no match")
	}
	if m := rs.Match("api.test", "POST", "/repos/x"); len(m) != 0 {
		t.Fatal("method matcher ignored")
	}
	for _, empty := range []string{``, `null`, `{}`} {
		if rs, err := ParseRules(json.RawMessage(empty)); rs != nil || err != nil {
			t.Fatalf("ParseRules(%q) = %v, %v", empty, rs, err)
		}
	}
}

func TestParseRulesRefuses(t *testing.T) {
	hdrs := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprintf(`"X-H%d":"v"`, i))
		}
		return `{"a.test":[{"transform":{"headers":{` + strings.Join(p, ",") + `}}}]}`
	}
	domains := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprintf(`"d%d.test":[]`, i))
		}
		return "{" + strings.Join(p, ",") + "}"
	}
	placeholders := func(n int) string {
		var p []string
		for i := range n {
			p = append(p, fmt.Sprintf(`${e2b.secrets.s%d}`, i))
		}
		return `{"a.test":[{"transform":{"headers":{"X":"` + strings.Join(p, "") + `"}}}]}`
	}
	for name, c := range map[string]struct{ in, msg string }{
		"wildcard":         {`{"*.a.test":[]}`, "not a valid domain"},
		"long domain":      {`{"` + strings.Repeat("a", 125) + `.test":[]}`, "not a valid domain"},
		"too many domains": {domains(11), "at most 10 domains"},
		"two rules":        {`{"a.test":[{"transform":{}},{"transform":{}}]}`, "at most 1 rule"},
		"21 headers":       {hdrs(21), "at most 20"},
		"bad header name":  {`{"a.test":[{"transform":{"headers":{"X Y":"v"}}}]}`, "not a valid header name"},
		"long header name": {`{"a.test":[{"transform":{"headers":{"` + strings.Repeat("x", 65) + `":"v"}}}]}`, "not a valid header name"},
		"long value":       {`{"a.test":[{"transform":{"headers":{"X":"` + strings.Repeat("x", 2049) + `"}}}]}`, "invalid value"},
		"CRLF value":       {`{"a.test":[{"transform":{"headers":{"X":"a\r\nB: c"}}}]}`, "invalid value"},
		"unclosed":         {`{"a.test":[{"transform":{"headers":{"X":"${e2b.secrets.gh"}}}]}`, MsgMalformedPlaceholder},
		"empty name":       {`{"a.test":[{"transform":{"headers":{"X":"${e2b.secrets.}"}}}]}`, MsgMalformedPlaceholder},
		"unknown kind":     {`{"a.test":[{"transform":{"headers":{"X":"${e2b.other.x}"}}}]}`, MsgMalformedPlaceholder},
		"33 secrets":       {placeholders(33), "at most 32"},
		"unknown field":    {`{"a.test":[{"transform":{"body":"x"}}]}`, "Invalid network rules"},
		"relative path":    {`{"a.test":[{"path":"repos","transform":{}}]}`, "must start with '/'"},
	} {
		_, err := ParseRules(json.RawMessage(c.in))
		var be *BadRulesError
		if !errors.As(err, &be) || !strings.Contains(be.Msg, c.msg) {
			t.Errorf("%s: err %v; want a BadRulesError with %q", name, err, c.msg)
		}
	}
	// The limits themselves pass.
	if _, err := ParseRules(json.RawMessage(hdrs(20))); err != nil {
		t.Errorf("20 headers: %v", err)
	}
	if _, err := ParseRules(json.RawMessage(placeholders(32))); err != nil {
		t.Errorf("32 secrets: %v", err)
	}
	if _, err := ParseRules(json.RawMessage(domains(10))); err != nil {
		t.Errorf("10 domains: %v", err)
	}
}

func TestExpandErrorsNameNoValue(t *testing.T) {
	got, err := Expand(context.Background(), "a ${e2b.secrets.X} b", func(_ context.Context, n string) ([]byte, error) { return []byte("V-" + n), nil })
	if err != nil || got != "a V-x b" {
		t.Fatalf("Expand = %q, %v", got, err)
	}
	_, err = Expand(context.Background(), "${e2b.secrets.y}", func(context.Context, string) ([]byte, error) { return nil, errors.New("gone") })
	if err == nil || !strings.Contains(err.Error(), `"y"`) {
		t.Fatalf("Expand error %v", err)
	}
}
