// Reading a `text/event-stream` answer as it arrives (a POST cannot use EventSource).

/** The `data` of each complete event in `buffer`, and what is left of an event still coming. */
export function takeEvents(buffer: string): { events: string[]; rest: string } {
  const events: string[] = [];
  const text = buffer.replace(/\r\n/g, "\n");
  let start = 0;
  for (let end = text.indexOf("\n\n"); end >= 0; end = text.indexOf("\n\n", start)) {
    const data = text
      .slice(start, end)
      .split("\n")
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""))
      .join("\n");
    if (data) events.push(data);
    start = end + 2;
  }
  return { events, rest: text.slice(start) };
}

/** Each event's `data`, parsed as JSON, handed to `on` as soon as the event is complete. */
export async function readEvents(body: ReadableStream<Uint8Array>, on: (event: unknown) => boolean | void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const taken = takeEvents(buffer + decoder.decode(value, { stream: true }));
      buffer = taken.rest;
      for (const data of taken.events) if (on(JSON.parse(data)) === true) return;
    }
  } finally {
    reader.releaseLock();
  }
}
