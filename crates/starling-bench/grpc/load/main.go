// grpc-load: a lean closed-loop gRPC load generator for run-grpc-bench.sh.
//
//	grpc-load -addr 127.0.0.1:PORT -method /bsky.Service/GetTimeline -data FILE -c 32 \
//	          [-connections 1] [-duration 30s] [-timeout 5s]
//
// ghz builds every request from JSON through protobuf reflection and spends ~70 µs of CPU per
// call, which on a 2-core machine shared with the server caps what it can measure. This tool
// sends request messages that are already encoded (FILE: each message as a little-endian u32
// length and its protobuf bytes, written by `grpc-requests`), round-robin over the file, through
// grpc-go with a pass-through codec, so the client does no message work at all. C workers each
// keep one call in flight, sharing CONNECTIONS HTTP/2 connections; a worker starts no call
// after the duration ends, so no call is cut off. Prints one `grpc_load:` line of key=value
// pairs (latencies in milliseconds; response bytes are the mean encoded response size).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawCodec passes already encoded messages through: requests are []byte, responses *[]byte.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func readMessages(path string) ([][]byte, error) {
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

type workerResult struct {
	latencies     []time.Duration
	codes         map[string]int
	responseBytes int64
}

func main() {
	addr := flag.String("addr", "", "host:port of the h2c gRPC server")
	method := flag.String("method", "", "full method name, /package.Service/Method")
	dataPath := flag.String("data", "", "file of length-prefixed encoded request messages")
	concurrency := flag.Int("c", 8, "calls in flight (workers)")
	connections := flag.Int("connections", 1, "HTTP/2 connections the workers share")
	duration := flag.Duration("duration", 30*time.Second, "how long to start calls")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of each call")
	flag.Parse()
	if *addr == "" || *method == "" || *dataPath == "" || *concurrency < 1 || *connections < 1 {
		fmt.Fprintln(os.Stderr, "usage: grpc-load -addr HOST:PORT -method /pkg.Service/Method -data FILE -c N [-connections N] [-duration D]")
		os.Exit(2)
	}
	messages, err := readMessages(*dataPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpc-load:", err)
		os.Exit(1)
	}
	conns := make([]*grpc.ClientConn, *connections)
	for i := range conns {
		conn, err := grpc.NewClient(*addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			fmt.Fprintln(os.Stderr, "grpc-load: dialing", *addr+":", err)
			os.Exit(1)
		}
		defer conn.Close()
		conns[i] = conn
	}

	var next atomic.Uint64
	results := make([]workerResult, *concurrency)
	var wg sync.WaitGroup
	started := time.Now()
	deadline := started.Add(*duration)
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := conns[w%len(conns)]
			res := workerResult{codes: map[string]int{}}
			var response []byte
			for time.Now().Before(deadline) {
				msg := messages[(next.Add(1)-1)%uint64(len(messages))]
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				t0 := time.Now()
				err := conn.Invoke(ctx, *method, msg, &response)
				elapsed := time.Since(t0)
				cancel()
				res.latencies = append(res.latencies, elapsed)
				res.codes[status.Code(err).String()]++
				if err == nil {
					res.responseBytes += int64(len(response))
				}
			}
			results[w] = res
		}(w)
	}
	wg.Wait()
	seconds := time.Since(started).Seconds()

	var all []time.Duration
	codes := map[string]int{}
	var responseBytes int64
	for _, res := range results {
		all = append(all, res.latencies...)
		for code, n := range res.codes {
			codes[code] += n
		}
		responseBytes += res.responseBytes
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	ms := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		idx := int(q * float64(len(all)))
		if idx >= len(all) {
			idx = len(all) - 1
		}
		return float64(all[idx].Microseconds()) / 1000
	}
	var names []string
	for code := range codes {
		names = append(names, code)
	}
	sort.Strings(names)
	var parts []string
	for _, code := range names {
		parts = append(parts, fmt.Sprintf("%s:%d", code, codes[code]))
	}
	ok := codes["OK"]
	meanBytes := 0.0
	if ok > 0 {
		meanBytes = float64(responseBytes) / float64(ok)
	}
	fmt.Printf("grpc_load: method=%s c=%d connections=%d requests=%d seconds=%.2f rps=%.0f "+
		"p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f ok=%d errors=%d codes=%s response_bytes_mean=%.0f\n",
		*method, *concurrency, *connections, len(all), seconds, float64(len(all))/seconds,
		ms(0.50), ms(0.90), ms(0.99), ms(0.999), ms(1.0), ok, len(all)-ok,
		strings.Join(parts, ","), meanBytes)
}
