package epochs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The encodings: an entry's tags (wire.FieldTags), a record's value.

// Separator parts the tags of an entry in their encoding: a tag may not
// contain it.
const Separator = "\x00"

// next splits the first tag off an encoded list.
func next(tags string) (tag, rest string) {
	if i := strings.IndexByte(tags, Separator[0]); i >= 0 {
		return tags[:i], tags[i+1:]
	}
	return tags, ""
}

// ErrTag is why a list of tags cannot be encoded.
var ErrTag = errors.New("an empty tag, or one with a NUL byte")

// Encode returns tags in their encoding (FieldTags): in their order, each
// once. A tag may not be empty or contain a NUL byte (ErrTag).
func Encode(tags []string) (string, error) {
	if len(tags) == 0 {
		return "", nil
	}
	seen := make(map[string]bool, len(tags))
	var b strings.Builder
	for _, tag := range tags {
		if tag == "" || strings.Contains(tag, Separator) {
			return "", fmt.Errorf("%w: %q", ErrTag, tag)
		}
		if seen[tag] {
			continue
		}
		seen[tag] = true
		if b.Len() > 0 {
			b.WriteString(Separator)
		}
		b.WriteString(tag)
	}
	return b.String(), nil
}

// Unique returns tags, each once, in their order, for an invalidation: an
// error when there are none, or one is not a tag (ErrTag).
func Unique(tags []string) ([]string, error) {
	enc, err := Encode(tags)
	if err == nil && enc == "" {
		err = errors.New("no tags")
	}
	return Tags(enc), err
}

// Tags returns the tags of an encoded list.
func Tags(tags string) []string {
	if tags == "" {
		return nil
	}
	return strings.Split(tags, Separator)
}

// Judge is Check on the records as they are, however old: right after a
// Refresh, or for a copy served while Redis cannot be used (what this
// process knows is all it can go by). A record never read is no epoch.
func (m *Mirror) Judge(born int64, tags string) Verdict {
	queued := m.queued()
	if queued && m.cfg.Held("") {
		return Hard
	}
	if cr := m.clear.Load(); cr != nil && cr.hard > 0 && born <= cr.hard {
		return Hard
	}
	v := Valid
	for tags != "" {
		var tag string
		tag, tags = next(tags)
		if queued && m.cfg.Held(tag) {
			return Hard
		}
		r, _ := m.tags.Load(tag)
		if tr, _ := r.(*record); tr != nil {
			switch {
			case tr.lost || tr.hard > 0 && born <= tr.hard:
				return Hard
			case tr.soft > 0 && born <= tr.soft:
				v = Soft
			}
		}
	}
	return v
}

// ParseRecord reads a record's value: "hard,soft" for a tag, "hard" for
// the Clear (server ms); 0 for what it lacks.
func ParseRecord(v string) (hard, soft int64) {
	h, s, _ := strings.Cut(v, ",")
	hard, _ = strconv.ParseInt(h, 10, 64)
	soft, _ = strconv.ParseInt(s, 10, 64)
	return hard, soft
}
