// Drives `troupe serve` with the official `openai` npm client and prints what came back as one
// JSON object on stdout; tests/server/server_cases.py checks it (against `troupe generate` and
// the server's own /tokenize and /metrics).
//
//   node openai_cases.mjs BASE_URL CASE ARGS_JSON
//
// CASE: completions | chat | disconnect | readme (ARGS_JSON holds the case's inputs).
import OpenAI from "openai";

const [baseURL, which, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson || "{}");
const client = new OpenAI({
  baseURL: `${baseURL}/v1`,
  apiKey: args.api_key || "unused",
  maxRetries: 0,
  timeout: 60_000,
});

/// A streamed completion, joined per choice index.
async function streamCompletion(body) {
  const stream = await client.completions.create({ ...body, stream: true });
  const texts = {};
  const finish = {};
  const stop = {};
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] || "") + c.text;
      if (c.finish_reason) {
        finish[c.index] = c.finish_reason;
        stop[c.index] = c.stop_reason;
      }
    }
  }
  return { texts, finish, stop, usage, chunks };
}

async function streamChat(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const texts = {};
  const roles = {};
  const finish = {};
  const logprobs = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles[c.index] = c.delta.role;
      texts[c.index] = (texts[c.index] || "") + (c.delta.content || "");
      if (c.logprobs) logprobs[c.index] = (logprobs[c.index] || []).concat(c.logprobs.content);
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, roles, finish, usage, logprobs };
}

const cases = {
  async completions() {
    const { model, prompt, max_tokens, stop } = args;
    const greedy = { model, prompt, max_tokens, temperature: 0 };
    const plain = await client.completions.create(greedy);
    const streamed = await streamCompletion({ ...greedy, stream_options: { include_usage: true } });
    const sampled = { model, prompt, max_tokens, temperature: 1.0, seed: 7, n: 3 };
    const n = await client.completions.create(sampled);
    const nStreamed = await streamCompletion(sampled);
    const logprobs = await client.completions.create({ ...greedy, logprobs: 2 });
    const echo = await client.completions.create({ ...greedy, echo: true, max_tokens: 2 });
    const stopped = await client.completions.create({ ...greedy, stop: [stop] });
    const stopStream = await streamCompletion({ ...greedy, stop: [stop] });
    const batch = await client.completions.create({ model, prompt: [prompt, "A wise man"], max_tokens: 3, temperature: 0 });
    return { plain, streamed, n, nStreamed, logprobs, echo, stopped, stopStream, batch };
  },

  async chat() {
    const { model, messages, max_tokens, stop } = args;
    const greedy = { model, messages, max_tokens, temperature: 0 };
    const plain = await client.chat.completions.create(greedy);
    const streamed = await streamChat({ ...greedy, stream_options: { include_usage: true } });
    const sampled = { model, messages, max_tokens, temperature: 1.0, seed: 7, n: 2 };
    const n = await client.chat.completions.create(sampled);
    const nStreamed = await streamChat(sampled);
    const logprobs = await client.chat.completions.create({ ...greedy, logprobs: true, top_logprobs: 2 });
    const logprobsStreamed = await streamChat({ ...greedy, logprobs: true, top_logprobs: 2 });
    const stopped = await client.chat.completions.create({ ...greedy, stop });
    return { plain, streamed, n, nStreamed, logprobs, logprobsStreamed, stopped };
  },

  /// Opens a long stream, reads a few chunks, then goes away mid-stream.
  async disconnect() {
    const controller = new AbortController();
    const stream = await client.completions.create(
      { model: args.model, prompt: args.prompt, max_tokens: args.max_tokens, ignore_eos: true, stream: true },
      { signal: controller.signal },
    );
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        chunks += chunk.choices.length;
        if (chunks === args.read_chunks) {
          // Tell the harness we are mid-stream (it reads /metrics now), then wait for its go.
          process.stdout.write(JSON.stringify({ mid_stream: chunks }) + "\n");
          await new Promise((resolve) => process.stdin.once("data", resolve));
          controller.abort();
        }
      }
    } catch (e) {
      if (e.name !== "AbortError" && !(e instanceof OpenAI.APIUserAbortError)) throw e;
    }
    return { chunks };
  },
};

try {
  const result = await cases[which]();
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exit(0);
} catch (e) {
  process.stdout.write(JSON.stringify({ error: String(e), status: e.status ?? null }) + "\n");
  process.exit(1);
}
