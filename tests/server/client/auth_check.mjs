// With a wrong API key the official client raises its AuthenticationError (HTTP 401).
//   node auth_check.mjs BASE_URL KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
try {
  await client.models.list();
  console.log("no error with a wrong key");
  process.exit(1);
} catch (e) {
  const ok = e instanceof OpenAI.AuthenticationError && e.status === 401;
  console.log(ok ? "401 AuthenticationError" : `unexpected: ${e}`);
  process.exit(ok ? 0 : 1);
}
