package wire

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestAnswers checks that an answers file's three kinds of line hold a response to what they
// say: the exact bytes, the bytes up to the order of an element's fields, or nothing.
func TestAnswers(t *testing.T) {
	// GetFollowsFollowingResponse { results { target_did "t", dids ["a", "b"] } }, and the same
	// with the DIDs the other way round.
	ab := []byte{0x0a, 0x09, 0x0a, 0x01, 't', 0x12, 0x01, 'a', 0x12, 0x01, 'b'}
	ba := []byte{0x0a, 0x09, 0x0a, 0x01, 't', 0x12, 0x01, 'b', 0x12, 0x01, 'a'}
	canonical, ok := Canonical(ba)
	if !ok || string(canonical) != string(ab) {
		t.Fatalf("Canonical(%x) = %x, %v; want %x", ba, canonical, ok, ab)
	}
	exact, sorted := DigestOf(ab), DigestOf(canonical)
	path := filepath.Join(t.TempDir(), "set.answers")
	text := hex.EncodeToString(exact[:]) + "\nunordered " + hex.EncodeToString(sorted[:]) + "\n-\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	answers, err := ReadAnswers(path)
	if err != nil || len(answers) != 3 {
		t.Fatalf("ReadAnswers: %d answers, %v", len(answers), err)
	}
	for _, c := range []struct {
		line     int
		response []byte
		want     bool
	}{
		{0, ab, true}, {0, ba, false}, {1, ab, true}, {1, ba, true}, {1, ab[:5], false},
		{2, ab, false},
	} {
		if got, _ := answers[c.line].Check(c.response); got != c.want {
			t.Errorf("line %d, response %x: right %v, want %v", c.line+1, c.response, got, c.want)
		}
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(exact[:])[1:]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAnswers(path); err == nil {
		t.Error("a 63-digit digest was read")
	}
}
