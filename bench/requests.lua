-- The requests of one `make bench` load run for wrk (bench/wrk.py starts it). Arguments after `--`: the raw HTTP
-- request, the expected status, the needle, the request limit per thread. A request holding @@@@@@@@@@ gets a number
-- of its own there every time it is sent (SendMessage's messageId: two digits of the thread, eight of its count); the
-- placeholder and the number are of one length, so Content-Length holds.
-- A response counts as unexpected unless its status is the expected one and its body holds the needle; a thread
-- stops once it has its limit of responses. done() prints the run as one JSON line.

local PLACEHOLDER = "@@@@@@@@@@"
local threads = {}

function setup(thread)
  thread:set("number", #threads)
  table.insert(threads, thread)
end

function init(args)
  local request = args[1]
  expected, needle, limit = tonumber(args[2]), args[3], tonumber(args[4])
  local at = request:find(PLACEHOLDER, 1, true)
  if at then
    before, after = request:sub(1, at - 1), request:sub(at + #PLACEHOLDER)
  else
    fixed = request
  end
  sent, answered, unexpected = 0, 0, 0
end

function request()
  sent = sent + 1
  if fixed then
    return fixed
  end
  return before .. string.format("%02d%08d", number % 100, sent) .. after
end

function response(status, headers, body)
  answered = answered + 1
  if status ~= expected or (needle ~= "" and not body:find(needle, 1, true)) then
    unexpected = unexpected + 1
  end
  if answered >= limit then
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do
    total = total + thread:get("unexpected")
  end
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "unexpected": %d, "errors": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "p999_us": %d}\n',
    summary.requests, summary.duration, total, errors.connect + errors.read + errors.write + errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
