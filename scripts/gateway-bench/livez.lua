-- The ceiling: GET /livez (the gateway's HTTP stack, no engine), keep-alive.
request = function()
  return wrk.format("GET", "/livez", nil, nil)
end
