// Package wire holds what grpc-load and grpc-answers share: the file of length-prefixed
// request messages both read, and the codec that sends those bytes as they are.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
)

// RawCodec passes already encoded messages through: requests are []byte, responses *[]byte.
type RawCodec struct{}

func (RawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (RawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (RawCodec) Name() string { return "proto" }

// ReadMessages reads a file of messages, each a 4-byte little-endian length and that many bytes.
func ReadMessages(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("%s: truncated length prefix", path)
		}
		n := int(binary.LittleEndian.Uint32(data))
		if len(data) < 4+n {
			return nil, fmt.Errorf("%s: message of %d bytes runs past the end", path, n)
		}
		res = append(res, data[4:4+n])
		data = data[4+n:]
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("%s: no messages", path)
	}
	return res, nil
}

// Digest is the SHA-256 of a response message's bytes: what `-answers` files hold, in hex, and
// what grpc-answers prints.
type Digest [sha256.Size]byte

// DigestOf returns the digest of an encoded response message.
func DigestOf(response []byte) Digest { return sha256.Sum256(response) }

// Answer is what the response to one request message must be.
type Answer struct {
	// Known is false when no answer to the message was verified (`-`): no response is right.
	Known bool
	// Unordered says the digest is of the response's canonical form (see Canonical), for
	// answers whose element order no query fixes.
	Unordered bool
	Digest    Digest
}

// Check returns whether a response is the expected one, and the digest it was compared by.
func (a *Answer) Check(response []byte) (bool, Digest) {
	if a.Unordered {
		canonical, ok := Canonical(response)
		if !ok {
			return false, Digest{}
		}
		response = canonical
	}
	got := DigestOf(response)
	return a.Known && got == a.Digest, got
}

// ReadAnswers reads a file of expected answers, one line per request message: the hex SHA-256
// of the exact bytes its answer must have; `unordered HEX`, the SHA-256 of the answer's
// canonical form; or `-` when no answer to it was verified.
func ReadAnswers(path string) ([]Answer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res []Answer
	for lineIdx, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "-" {
			res = append(res, Answer{})
			continue
		}
		a := Answer{Known: true}
		digest, unordered := strings.CutPrefix(line, "unordered ")
		a.Unordered = unordered
		if n, err := hex.Decode(a.Digest[:], []byte(digest)); err != nil || n != len(a.Digest) || len(digest) != 2*len(a.Digest) {
			return nil, fmt.Errorf("%s:%d: not `[unordered ]SHA256HEX` or `-`: %q", path, lineIdx+1, line)
		}
		res = append(res, a)
	}
	return res, nil
}

// fieldSpans splits a protobuf message into its top-level fields, each as its encoded bytes
// (key, length, value), or returns false if it does not parse.
func fieldSpans(msg []byte) ([][]byte, bool) {
	var res [][]byte
	for len(msg) > 0 {
		key, n := binary.Uvarint(msg)
		if n <= 0 {
			return nil, false
		}
		size := uint64(n)
		switch key & 7 {
		case 0:
			_, m := binary.Uvarint(msg[n:])
			if m <= 0 {
				return nil, false
			}
			size += uint64(m)
		case 1:
			size += 8
		case 5:
			size += 4
		case 2:
			length, m := binary.Uvarint(msg[n:])
			if m <= 0 {
				return nil, false
			}
			size += uint64(m) + length
		default:
			return nil, false
		}
		if size > uint64(len(msg)) {
			return nil, false
		}
		res = append(res, msg[:size])
		msg = msg[size:]
	}
	return res, true
}

// Canonical returns a response with the fields of each element of its top-level field 1 sorted
// by their encoded bytes (the elements keep their order and sizes), or false if it does not
// parse. Two answers that differ only in the order of an element's repeated values, such as
// the known followers of one target in GetFollowsFollowing, have one canonical form.
func Canonical(response []byte) ([]byte, bool) {
	top, ok := fieldSpans(response)
	if !ok {
		return nil, false
	}
	res := make([]byte, 0, len(response))
	for _, span := range top {
		key, n := binary.Uvarint(span)
		if key != 1<<3|2 {
			res = append(res, span...)
			continue
		}
		_, m := binary.Uvarint(span[n:])
		inner, ok := fieldSpans(span[n+m:])
		if !ok {
			return nil, false
		}
		sort.Slice(inner, func(i, j int) bool { return bytes.Compare(inner[i], inner[j]) < 0 })
		res = append(res, span[:n+m]...)
		for _, field := range inner {
			res = append(res, field...)
		}
	}
	return res, true
}
