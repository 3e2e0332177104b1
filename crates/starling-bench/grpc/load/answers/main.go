// grpc-answers: sends each request message of a file once, in order, and prints what came back,
// so that two servers' answers to the same requests can be compared line by line (diff).
//
//	grpc-answers -addr 127.0.0.1:PORT -method /bsky.Service/GetTimeline -data FILE [-timeout 30s]
//
// FILE holds length-prefixed encoded request messages, as for grpc-load (written by
// `grpc-requests` or `compare-requests`). One line per message:
//
//	INDEX CODE ITEMS SHA256 [URI ...]
//
// CODE is the gRPC status code, ITEMS the number of elements of the response's top-level field 1
// (the items of GetTimeline, GetAuthorFeed, ...), SHA256 the hash of the whole encoded response
// (items, their flags and the cursor; the digest `grpc-load -answers` compares), and each URI
// the field 1 string of one element, in order (a feed item's post URI, followed by `<` and its
// field 3, the repost URI, when there is one).
// Calls go one at a time through one connection, with the same pass-through codec as grpc-load;
// a call that fails is printed with its code (ITEMS 0), and the next one is sent.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"starling/bench/grpc-load/wire"
)

// field is one top-level field of a protobuf message: its number and, for a length-delimited
// field, its bytes.
type field struct {
	number uint64
	bytes  []byte
}

// fields splits a protobuf message into its top-level fields, or returns false if it does not
// parse.
func fields(msg []byte) ([]field, bool) {
	var res []field
	for len(msg) > 0 {
		key, n := binary.Uvarint(msg)
		if n <= 0 {
			return nil, false
		}
		msg = msg[n:]
		f := field{number: key >> 3}
		switch key & 7 {
		case 0:
			if _, n = binary.Uvarint(msg); n <= 0 {
				return nil, false
			}
			msg = msg[n:]
		case 1:
			if len(msg) < 8 {
				return nil, false
			}
			msg = msg[8:]
		case 5:
			if len(msg) < 4 {
				return nil, false
			}
			msg = msg[4:]
		case 2:
			size, n := binary.Uvarint(msg)
			if n <= 0 || uint64(len(msg)-n) < size {
				return nil, false
			}
			f.bytes = msg[n : n+int(size)]
			msg = msg[n+int(size):]
		default:
			return nil, false
		}
		res = append(res, f)
	}
	return res, true
}

// describe returns the number of field-1 elements of a response and each one's URIs.
func describe(response []byte) (int, []string) {
	top, ok := fields(response)
	if !ok {
		return -1, nil
	}
	count := 0
	var uris []string
	for _, f := range top {
		if f.number != 1 {
			continue
		}
		count++
		inner, ok := fields(f.bytes)
		if !ok {
			uris = append(uris, "?")
			continue
		}
		var uri, repost string
		for _, g := range inner {
			switch g.number {
			case 1:
				uri = string(g.bytes)
			case 3:
				repost = string(g.bytes)
			}
		}
		if repost != "" {
			uri += "<" + repost
		}
		uris = append(uris, uri)
	}
	return count, uris
}

func main() {
	addr := flag.String("addr", "", "host:port of the h2c gRPC server")
	method := flag.String("method", "", "full method name, /package.Service/Method")
	dataPath := flag.String("data", "", "file of length-prefixed encoded request messages")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each call")
	flag.Parse()
	if *addr == "" || *method == "" || *dataPath == "" {
		fmt.Fprintln(os.Stderr, "usage: grpc-answers -addr HOST:PORT -method /pkg.Service/Method -data FILE [-timeout D]")
		os.Exit(2)
	}
	messages, err := wire.ReadMessages(*dataPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-answers:", err)
		os.Exit(1)
	}
	conn, err := grpc.NewClient(*addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wire.RawCodec{}), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-answers: dialing", *addr+":", err)
		os.Exit(1)
	}
	defer conn.Close()
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	var response []byte
	for i, msg := range messages {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		response = response[:0]
		err := conn.Invoke(ctx, *method, msg, &response)
		cancel()
		code := status.Code(err)
		count, uris := describe(response)
		if err != nil {
			count, uris = 0, nil
		}
		sum := wire.DigestOf(response)
		fmt.Fprintf(out, "%d %s %d %s", i, code, count, hex.EncodeToString(sum[:]))
		if len(uris) > 0 {
			fmt.Fprintf(out, " %s", strings.Join(uris, " "))
		}
		fmt.Fprintln(out)
	}
}
