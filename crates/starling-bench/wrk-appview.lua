-- wrk script for the stock AppView's getTimeline on Starling, used by run-grpc-bench.sh.
--
--   wrk -t2 -c8 -d30s --latency -s wrk-appview.lua http://127.0.0.1:PORT -- READERS PASSWORD [LIMIT]
--
-- READERS is a file of reader DIDs, one a line. Each request asks for
-- /xrpc/app.bsky.feed.getTimeline?limit=LIMIT (50) as the next reader of the file, round-robin
-- per thread (each thread starts at its own offset), through the AppView's test back door:
-- basic auth `admin:PASSWORD` plus the header `appview-as-did: DID` (appview/README.md).
-- `done` prints one `wrk_result:` line of key=value pairs (latencies in microseconds) for the
-- script to parse.

local thread_count = 0

function setup(thread)
   thread_count = thread_count + 1
   thread:set("thread_no", thread_count)
end

-- Base64 of a short ASCII string, for the Authorization header (wrk's Lua has no library).
local function base64(text)
   local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
   local out = {}
   for i = 1, #text, 3 do
      local a, b, c = text:byte(i, i + 2)
      local n = a * 65536 + (b or 0) * 256 + (c or 0)
      for j = 3, 0, -1 do
         local idx = math.floor(n / 64 ^ j) % 64 + 1
         out[#out + 1] = alphabet:sub(idx, idx)
      end
      if c == nil then out[#out] = "=" end
      if b == nil then out[#out - 1] = "=" end
   end
   return table.concat(out)
end

local readers = {}
local next_idx = 1
local path, authorization

function init(args)
   local file, password, limit = args[1], args[2], args[3] or "50"
   if file == nil or password == nil then
      error("usage: -- READERS PASSWORD [LIMIT]")
   end
   for line in io.lines(file) do
      if line:match("^did:") then
         readers[#readers + 1] = line
      end
   end
   if #readers == 0 then
      error("no reader DIDs in " .. file)
   end
   path = "/xrpc/app.bsky.feed.getTimeline?limit=" .. limit
   authorization = "Basic " .. base64("admin:" .. password)
   next_idx = ((thread_no or 1) - 1) * 7 % #readers + 1
end

function request()
   local did = readers[next_idx]
   next_idx = next_idx % #readers + 1
   return wrk.format("GET", path, { ["authorization"] = authorization, ["appview-as-did"] = did })
end

function done(summary, latency, requests)
   local seconds = summary.duration / 1e6
   local errors = summary.errors
   io.write(string.format(
      "wrk_result: requests=%d seconds=%.2f rps=%.1f p50_us=%d p90_us=%d p99_us=%d p999_us=%d " ..
      "max_us=%d mean_us=%.0f bytes=%d non2xx=%d connect_errors=%d read_errors=%d " ..
      "write_errors=%d timeouts=%d\n",
      summary.requests, seconds, summary.requests / seconds,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean, summary.bytes, errors.status,
      errors.connect, errors.read, errors.write, errors.timeout))
end
