// llama.cpp peer of `pointact bench vlm` (node-llama-cpp 3.21.1, CPU prebuilt binaries only).
//
//   node bench.mjs REQUEST.json   ->  one JSON line on stdout ({"error": ...} and exit 1 on failure)
//
// REQUEST: {model, threads, prompt: [ids], decode_tokens, warmup_tokens, exact, probs_top_k}.
// Token ids go in directly (the GGUF's vocabulary only has to load). Timed like our side: one
// untimed warm-up, then the prompt is evaluated in one batch and greedy decoding starts; prompt
// tok/s = prompt length / time to the first new token, decode tok/s = the remaining new tokens /
// their time. End-of-generation tokens do not stop it (random weights), so exactly decode_tokens
// tokens are made. With probs_top_k > 0 it instead prints the next-token distribution after the
// prompt (temperature 1, no truncation) as its top k [id, probability] pairs (parity test).
// exact: f32 KV cache and no flash attention, whose CPU kernel rounds K and V to f16 even with
// an f32 cache; otherwise llama.cpp's defaults (flash attention "auto", f16 KV cache).
//
// This file must sit in the folder whose node_modules holds node-llama-cpp (ESM resolves imports
// from the script's own folder): pointact copies it there before running it.
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const fail = (e) => {
  console.log(JSON.stringify({error: String(e && e.message ? e.message : e)}));
  process.exit(1);
};

async function main() {
  const req = JSON.parse(readFileSync(process.argv[2], "utf8"));
  const threads = req.threads, prompt = req.prompt, want = req.decode_tokens;
  const t0 = performance.now();
  // No GPU probing, never a source build: a missing prebuilt binary is an error, not a compile.
  const llama = await getLlama({gpu: false, build: "never", maxThreads: threads,
    logLevel: LlamaLogLevel.error});
  const model = await llama.loadModel({modelPath: req.model, useMlock: false});
  const exact = req.exact
    ? {flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"}
    : {};
  const ctx = await model.createContext({
    contextSize: Math.max(256, prompt.length + want + 16),
    // The whole prompt in one batch, as our prefill takes it.
    batchSize: Math.max(prompt.length, 32),
    threads: {ideal: threads, min: threads},
    ...exact,
  });
  const seq = ctx.getSequence();
  const loadS = (performance.now() - t0) / 1e3;
  const version = `node-llama-cpp 3.21.1 (llama.cpp ${llama.llamaCppRelease.release}, ${llama.buildType}), ` +
    `${threads} threads, flash attention ${ctx.flashAttention}, KV ${req.exact ? "f32" : "f16"}`;

  if (req.probs_top_k > 0) {
    const [out] = await seq.controlledEvaluate([
      ...prompt.slice(0, -1),
      // topK 0 = the whole vocabulary, topP 1 and minP 0 cut nothing: the probabilities are
      // the softmax of all logits (node-llama-cpp's defaults, top-k 40 and top-p 0.95, would
      // renormalise over the survivors).
      [prompt[prompt.length - 1],
        {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}}],
    ]).then((r) => r.slice(-1));
    const probs = [...out.next.probabilities.entries()].slice(0, req.probs_top_k);
    console.log(JSON.stringify({probs, version}));
    return;
  }

  const generate = async (ids, n) => {
    const stamps = [], tokens = [];
    const start = performance.now();
    for await (const tok of seq.evaluate(ids, {temperature: 0, yieldEogToken: true})) {
      stamps.push(performance.now());
      tokens.push(tok);
      if (tokens.length >= n) break;
    }
    return {start, stamps, tokens};
  };
  await generate(prompt.slice(0, 8), req.warmup_tokens);
  await seq.clearHistory();
  const {start, stamps, tokens} = await generate(prompt, want);
  const firstMs = stamps[0] - start, steps = tokens.length - 1;
  console.log(JSON.stringify({
    load_s: loadS,
    prompt_tokens: prompt.length,
    prompt_tok_s: prompt.length / firstMs * 1e3,
    decode_steps: steps,
    decode_tok_s: steps > 0 ? steps / (stamps[steps] - stamps[0]) * 1e3 : 0,
    tokens,
    version,
  }));
}

main().then(() => process.exit(0), fail);
