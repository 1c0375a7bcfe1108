import { describe, expect, it } from "vitest";
import { readEvents, takeEvents } from "../src/lib/events";

describe("takeEvents", () => {
  it("returns complete events and keeps the part still coming", () => {
    const { events, rest } = takeEvents('data: {"talk":1}\n\ndata: {"ta');
    expect(events).toEqual(['{"talk":1}']);
    expect(rest).toBe('data: {"ta');
  });

  it("joins multi-line data, ignores comments and other fields, and accepts CRLF", () => {
    const { events, rest } = takeEvents(": hi\r\nevent: x\r\ndata: [1,\r\ndata:2]\r\n\r\n");
    expect(events).toEqual(["[1,\n2]"]);
    expect(rest).toBe("");
  });
});

describe("readEvents", () => {
  it("hands each event over as soon as its chunk arrives, split anywhere", async () => {
    const chunks = ['data: {"talk":{"progress":1}}\n', '\ndata: {"rep', 'ly":{"ok":true}}\n\n'];
    const seen: unknown[] = [];
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(new TextEncoder().encode(chunk));
        controller.close();
      },
    });
    await readEvents(body, (event) => {
      seen.push(event);
    });
    expect(seen).toEqual([{ talk: { progress: 1 } }, { reply: { ok: true } }]);
  });
});
