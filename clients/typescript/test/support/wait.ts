// Waiting for a condition with a deadline (never a fixed sleep as synchronisation).

import { setTimeout as delay } from "node:timers/promises";

/**
 * Call `probe` until it returns a value other than undefined, every `intervalMs`, and return
 * that value; throw naming `what` and the last result or error once `timeoutMs` has passed.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  { timeoutMs = 20_000, intervalMs = 100 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
      last = "condition not met";
    } catch (err) {
      last = err;
    }
    if (performance.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${String(last)}`);
    }
    await delay(intervalMs); // poll interval of the condition above
  }
}
