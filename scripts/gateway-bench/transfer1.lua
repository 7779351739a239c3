-- One random transfer per request between accounts 1..10000, keep-alive.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local from = math.random(1, 10000)
  local to = from % 10000 + 1
  return wrk.format(nil, "/v1/commands", nil,
    string.format('[{"Transfer": {"from": %d, "to": %d, "amount": 1}}]', from, to))
end
