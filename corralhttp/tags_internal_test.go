package corralhttp

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
)

// tagsOf reads Surrogate-Key by spaces and Cache-Tag by commas and spaces,
// every line, in order, distinct, empty members dropped.
func TestTagsOf(t *testing.T) {
	for _, tc := range []struct {
		sk, ct []string
		want   []string
	}{
		{nil, nil, nil},
		{[]string{"a b  a\tc"}, nil, []string{"a", "b", "c"}},
		{nil, []string{"a, b,,c ,d e"}, []string{"a", "b", "c", "d", "e"}},
		{[]string{"x y", " z "}, []string{"y,w", ""}, []string{"x", "y", "z", "w"}},
		{[]string{"", "  "}, []string{" , ,"}, nil},
		{[]string{"a,b"}, nil, []string{"a,b"}}, // a comma is a Surrogate-Key member's
	} {
		h := http.Header{}
		for _, v := range tc.sk {
			h.Add("Surrogate-Key", v)
		}
		for _, v := range tc.ct {
			h.Add("Cache-Tag", v)
		}
		if got := tagsOf(h); !slices.Equal(got, tc.want) {
			t.Errorf("Surrogate-Key %q, Cache-Tag %q: tags %q, want %q", tc.sk, tc.ct, got, tc.want)
		}
	}
}

// A request's URL tags are those URLTag gives for its path, and with a
// query for its URL, whatever the spelling of its path; none is a
// surrogate key.
func TestURLTags(t *testing.T) {
	for _, tc := range []struct {
		request string
		want    []string
	}{
		{"/p", []string{"url /p"}},
		{"/p?", []string{"url /p"}},
		{"/p?a=1&b=2", []string{"url /p", "url /p?a=1&b=2"}},
		{"/%7Ep/a%2Fb", []string{"url /~p/a/b"}},
		{"/caf%C3%A9?q=%20", []string{"url /caf%C3%A9", "url /caf%C3%A9?q=%20"}},
		{"/a%3Fb?c", []string{"url /a%3Fb", "url /a%3Fb?c"}},
		{"//x", []string{"url //x"}},
	} {
		u, err := url.ParseRequestURI(tc.request)
		if err != nil {
			t.Fatal(err)
		}
		got := urlTags(u.Path, u.RawQuery)
		if !slices.Equal(got, tc.want) {
			t.Errorf("request %s: URL tags %q, want %q", tc.request, got, tc.want)
		}
		for _, tag := range got {
			if slices.Contains(tagsOf(http.Header{"Surrogate-Key": {tag}, "Cache-Tag": {tag}}), tag) {
				t.Errorf("URL tag %q is a surrogate key", tag)
			}
		}
		if want, err := URLTag(tc.request); err != nil || want != got[len(got)-1] {
			t.Errorf("URLTag(%q) = %q, %v; want %q", tc.request, want, err, got[len(got)-1])
		}
	}
}
