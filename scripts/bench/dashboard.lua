-- wrk script for scripts/bench-dashboard.sh: GET one dashboard page with the
-- session cookie of a read-only key (METER_BENCH_COOKIE). Prints one
-- machine-readable line at the end:
--   RESULT requests=<n> non2xx=<n> errors=<n> rps=<r> p50_ms=<x> p95_ms=<y> p99_ms=<z>
local cookie = os.getenv("METER_BENCH_COOKIE") or ""

function init(args)
	wrk.headers["Cookie"] = cookie
end

function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		"RESULT requests=%d non2xx=%d errors=%d rps=%.0f p50_ms=%.2f p95_ms=%.2f p99_ms=%.2f\n",
		summary.requests, e.status, e.connect + e.read + e.write + e.timeout,
		summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
		latency:percentile(95) / 1000, latency:percentile(99) / 1000))
end
