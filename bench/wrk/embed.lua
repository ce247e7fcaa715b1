-- One request shape, sent over and over: POST the JSON body in the file named by
-- $HEADWISE_BENCH_BODY to the URL wrk was given (e.g. http://127.0.0.1:8000/v1/embed).
-- At the end, one line "HEADWISE_JSON {...}" with counts, errors and latency percentiles (µs),
-- which bench/http.py parses. Non-2xx/3xx answers are counted in "status".
local path = os.getenv("HEADWISE_BENCH_BODY")
if path == nil then
  error("set HEADWISE_BENCH_BODY to the file holding the request body")
end
local f = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("HEADWISE_BENCH_API_KEY")
if key ~= nil and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'HEADWISE_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d, ' ..
    '"p50": %d, "p90": %d, "p95": %d, "p99": %d, "mean": %.1f, "max": %d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency.mean, latency.max))
end
