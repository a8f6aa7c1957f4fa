-- wrk script for scripts/bench-checks.sh: POST /v1/checks/create with a
-- unique sandbox id per request (thread number + counter), either all on
-- one hot key ("hot") or spread over 1,000 keys k0..k999 ("spread"); or
-- ("invalid") the hot key's requests with vcpus 0, which meterd refuses
-- with 400 before any database work: its HTTP path alone. The warm-up
-- ("warm") creates on the hot key with hour-long leases, so that none of
-- its holds ends, and no sweep of them runs, during the measured runs.
-- Prints one machine-readable line at the end:
--   RESULT requests=<n> non2xx=<n> errors=<n> rps=<r> p50_ms=<x> p99_ms=<y>
local threads = {}
local counter = 0
local mode = "hot"
local token = os.getenv("METER_BENCH_TOKEN") or ""

function setup(thread)
	thread:set("tid", #threads)
	table.insert(threads, thread)
end

function init(args)
	mode = args[1] or "hot"
	wrk.method = "POST"
	wrk.headers["Content-Type"] = "application/json"
	wrk.headers["Authorization"] = "Bearer " .. token
end

function request()
	counter = counter + 1
	local key = "hot"
	if mode == "spread" then
		key = "k" .. ((counter * 7 + tid * 131) % 1000)
	end
	local vcpus = 1
	if mode == "invalid" then
		vcpus = 0
	end
	local lease = 60
	if mode == "warm" then
		lease = 3600
	end
	local body = string.format(
		'{"key_id":"%s","sandbox_id":"b-%s-%d-%d","vcpus":%d,"memory_mib":1024,"lease_seconds":%d}',
		key, mode, tid, counter, vcpus, lease)
	return wrk.format(nil, "/v1/checks/create", nil, body)
end

function done(summary, latency, requests)
	local secs = summary.duration / 1e6
	local e = summary.errors
	io.write(string.format(
		"RESULT requests=%d non2xx=%d errors=%d rps=%.0f p50_ms=%.2f p99_ms=%.2f\n",
		summary.requests, e.status, e.connect + e.read + e.write + e.timeout,
		summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
