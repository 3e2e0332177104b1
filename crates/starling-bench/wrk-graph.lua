-- wrk script for Starling's graph HTTP API, used by run-graph-bench.sh.
--
--   wrk -t2 -c32 -d30s --latency -s wrk-graph.lua http://127.0.0.1:PORT -- SIDE MODE SEED [LIMIT]
--
-- SIDE is the side file of `gen-follows` (`target DID FOLLOWERS` and `viewer DID FOLLOWS`
-- lines). Each request draws a viewer uniformly from the viewers and a target uniformly from
-- the targets (the most-followed accounts: GraphD's worst case of social proof). MODE:
--   known-followers  GET /v1/graph/known-followers?viewer=V&target=T[&limit=LIMIT]
--   follows          GET /v1/graph/follows?actor=V&subject=T
--   health           GET /health (the load generator's ceiling on a trivial endpoint)
-- Every wrk thread seeds its own generator from SEED and its thread number. `done` prints one
-- `wrk_result:` line of key=value pairs (latencies in microseconds) for the script to parse.

local thread_count = 0
local threads = {}

function setup(thread)
   thread_count = thread_count + 1
   thread:set("thread_no", thread_count)
   table.insert(threads, thread)
end

local targets, viewers = {}, {}
local mode, limit = "known-followers", nil

function init(args)
   local side = args[1]
   mode = args[2] or mode
   local seed = tonumber(args[3] or "7")
   limit = args[4]
   if side == nil then
      error("usage: -- SIDE MODE SEED [LIMIT]")
   end
   for line in io.lines(side) do
      local kind, did = line:match("^(%a+) (%S+)")
      if kind == "target" then
         targets[#targets + 1] = did
      elseif kind == "viewer" then
         viewers[#viewers + 1] = did
      end
   end
   if #targets == 0 or #viewers == 0 then
      error("no targets or viewers in " .. side)
   end
   math.randomseed(seed * 1000 + (thread_no or 0))
end

function request()
   if mode == "health" then
      return wrk.format("GET", "/health")
   end
   local viewer = viewers[math.random(#viewers)]
   local target = targets[math.random(#targets)]
   local path
   if mode == "follows" then
      path = "/v1/graph/follows?actor=" .. viewer .. "&subject=" .. target
   else
      path = "/v1/graph/known-followers?viewer=" .. viewer .. "&target=" .. target
      if limit ~= nil and limit ~= "" then
         path = path .. "&limit=" .. limit
      end
   end
   return wrk.format("GET", path)
end

function done(summary, latency, requests)
   local seconds = summary.duration / 1e6
   local errors = summary.errors
   io.write(string.format(
      "wrk_result: requests=%d seconds=%.2f rps=%.0f p50_us=%d p90_us=%d p99_us=%d p999_us=%d " ..
      "max_us=%d mean_us=%.0f bytes=%d non2xx=%d connect_errors=%d read_errors=%d " ..
      "write_errors=%d timeouts=%d\n",
      summary.requests, seconds, summary.requests / seconds,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean, summary.bytes, errors.status,
      errors.connect, errors.read, errors.write, errors.timeout))
end
