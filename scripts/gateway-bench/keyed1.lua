-- One random transfer per request, each with a new Idempotency-Key, keep-alive.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("id", threads)
end
local counter = 0
local prefix = nil
request = function()
  counter = counter + 1
  -- Each wrk thread has its own Lua state: the thread's id keeps their keys apart.
  if prefix == nil then prefix = tostring(id) .. "-" .. tostring(os.time()) end
  local from = math.random(1, 10000)
  local to = from % 10000 + 1
  return wrk.format(nil, "/v1/commands", {["Idempotency-Key"] = prefix .. "-" .. counter},
    string.format('[{"Transfer": {"from": %d, "to": %d, "amount": 1}}]', from, to))
end
