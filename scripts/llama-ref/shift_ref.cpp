// Reference for Cera's context-shift fixtures, linked against a llama.cpp build: greedy
// generation with llama-completion's context shift, on a logical context of N_CTX tokens
// (llama.cpp pads its KV cache to a multiple of 256 cells, so the limit is applied here, as
// llama-completion applies it to n_ctx): before each batch, if n_past + n_batch >= N_CTX, keep
// the first n_keep tokens, discard half of the rest (llama_memory_seq_rm) and move the
// remainder down (llama_memory_seq_add; llama.cpp re-rotates the keys). n_keep follows
// llama-completion: --keep past the prompt keeps the prompt, else --keep plus BOS.
//
//   shift_ref MODEL PROMPT_FILE N_CTX N_KEEP N_PREDICT OUT_JSON
//   -> {"prompt_tokens", "n_keep", "shifts": [step, ...], "steps": [{token, top1, second, top2}]}
#include "llama.h"

#include <clocale>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static void set_tokens(llama_batch_ext * b, const llama_token * t, int n, llama_pos pos0) {
    llama_batch_ext_clear(b);
    for (int i = 0; i < n; ++i) {
        const int32_t idx = llama_batch_ext_add_token(b, 0, t[i]);
        const llama_pos pos = pos0 + i;
        llama_batch_ext_set_pos(b, idx, &pos);
    }
    llama_batch_ext_set_output_logits(b, n - 1, true);
}

int main(int argc, char ** argv) {
    std::setlocale(LC_NUMERIC, "C");
    if (argc != 7) {
        fprintf(stderr, "usage: %s MODEL PROMPT_FILE N_CTX N_KEEP N_PREDICT OUT_JSON\n", argv[0]);
        return 2;
    }
    std::ifstream pf(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << pf.rdbuf();
    const std::string prompt = ss.str();
    const int n_ctx = std::stoi(argv[3]);
    int n_keep = std::stoi(argv[4]);
    const int n_predict = std::stoi(argv[5]);

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load model\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const int n_prompt = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), nullptr, 0, true, true);
    std::vector<llama_token> toks(n_prompt);
    llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(), true, true);
    if (n_keep < 0 || n_keep > n_prompt) n_keep = n_prompt;
    else n_keep += llama_vocab_get_add_bos(vocab) ? 1 : 0;

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_prompt > 1 ? n_prompt : 1;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
    llama_memory_t mem = llama_get_memory(ctx);
    llama_batch_ext * batch = llama_batch_ext_init(ctx);

    std::string json = "{\"prompt_tokens\":[";
    for (int i = 0; i < n_prompt; ++i) json += (i ? "," : "") + std::to_string(toks[i]);
    json += "],\"n_keep\":" + std::to_string(n_keep) + ",\"steps\":[";
    std::string shifts = "";
    std::vector<llama_token> embd = toks;
    int n_past = 0;
    for (int step = 0; step < n_predict; ++step) {
        if (n_past + (int) embd.size() >= n_ctx) {
            const int n_left = n_past - n_keep;
            const int n_discard = n_left / 2;
            llama_memory_seq_rm(mem, 0, n_keep, n_keep + n_discard);
            llama_memory_seq_add(mem, 0, n_keep + n_discard, n_past, -n_discard);
            n_past -= n_discard;
            shifts += (shifts.empty() ? "" : ",") + std::to_string(step);
        }
        set_tokens(batch, embd.data(), embd.size(), n_past);
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        n_past += embd.size();
        const float * logits = llama_get_logits_ith(ctx, -1);
        int best = 0, second = -1;
        for (int i = 1; i < n_vocab; ++i) {
            if (logits[i] > logits[best]) { second = best; best = i; }
            else if (second < 0 || logits[i] > logits[second]) { second = i; }
        }
        char buf[160];
        snprintf(buf, sizeof(buf), "%s{\"token\":%d,\"top1\":%.6f,\"second\":%d,\"top2\":%.6f}",
                 step ? "," : "", best, logits[best], second, logits[second]);
        json += buf;
        if (llama_vocab_is_eog(vocab, best)) break;
        embd.assign(1, best);
    }
    json += "],\"shifts\":[" + shifts + "]}\n";
    std::ofstream jf(argv[6]);
    jf << json;
    llama_batch_ext_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
