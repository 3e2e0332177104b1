// Package wire holds what grpc-load and grpc-answers share: the file of length-prefixed
// request messages both read, and the codec that sends those bytes as they are.
package wire

import (
	"encoding/binary"
	"fmt"
	"os"
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
