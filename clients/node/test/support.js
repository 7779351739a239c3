// What both test files share.

import assert from "node:assert/strict";
import { GatewayError } from "enginebank";

/** The GatewayError `call` throws (failing when it throws none, or something else). */
export async function refusal(call) {
  try {
    await call();
  } catch (error) {
    assert.ok(error instanceof GatewayError, `not a GatewayError: ${error}`);
    return error;
  }
  assert.fail("no GatewayError");
}
