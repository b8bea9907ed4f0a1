// Reference dumper for Cera's generation fixtures, linked against a llama.cpp build.
// For one prompt: tokenizes it as llama-simple does (add special, parse special), prefills it,
// writes the last-position logits (all of them, f32 LE) and then greedy-decodes N tokens,
// recording each token and the top-2 logits at that step. CERA_REF_LORA names a LoRA adapter to
// apply (see below).
//
//   dump_ref MODEL PROMPT_FILE N_PREDICT OUT_PREFIX
//   -> OUT_PREFIX.logits (f32 LE, n_vocab values), OUT_PREFIX.json
#include "llama.h"

#include <clocale>
#include <cstdlib>
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
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL PROMPT_FILE N_PREDICT OUT_PREFIX\n", argv[0]);
        return 2;
    }
    std::ifstream pf(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << pf.rdbuf();
    const std::string prompt = ss.str();
    const int n_predict = std::stoi(argv[3]);
    const std::string out = argv[4];

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    // no weight repacking: the AMX path of a native build faults on VMs that hide AMX state
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load model\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const int n_prompt = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), nullptr, 0, true, true);
    std::vector<llama_token> toks(n_prompt);
    llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), toks.size(), true, true);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + n_predict + 8;
    cp.n_batch = n_prompt;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    // CERA_REF_NO_FA=1: the non-flash attention path (for measuring llama.cpp's own spread)
    if (getenv("CERA_REF_NO_FA")) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    // CERA_REF_KV_F32=1: an f32 KV cache (no f16 rounding of keys and values), for models whose
    // expert routing would amplify those differences; takes effect with CERA_REF_NO_FA=1 only
    // (the CPU flash-attention path keeps f16 whatever the cache type asked for)
    if (getenv("CERA_REF_KV_F32")) { cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32; }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }

    // CERA_REF_LORA=ADAPTER.gguf (and CERA_REF_LORA_SCALE, default 1): run with that LoRA adapter
    if (const char * lp = getenv("CERA_REF_LORA")) {
        llama_adapter_lora * ad = llama_adapter_lora_init(model, lp);
        if (!ad) { fprintf(stderr, "cannot load adapter %s\n", lp); return 1; }
        float sc = getenv("CERA_REF_LORA_SCALE") ? (float) atof(getenv("CERA_REF_LORA_SCALE")) : 1.0f;
        if (llama_set_adapters_lora(ctx, &ad, 1, &sc)) { fprintf(stderr, "cannot set adapter\n"); return 1; }
    }

    llama_batch_ext * batch = llama_batch_ext_init(ctx);
    set_tokens(batch, toks.data(), n_prompt, 0);

    std::string json = "{\"prompt_tokens\":[";
    for (int i = 0; i < n_prompt; ++i) json += (i ? "," : "") + std::to_string(toks[i]);
    json += "],\"steps\":[";
    int n_pos = 0, n_tokens = n_prompt;
    for (int step = 0; step < n_predict; ++step) {
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        n_pos += n_tokens;
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (step == 0) {
            FILE * f = fopen((out + ".logits").c_str(), "wb");
            fwrite(logits, sizeof(float), n_vocab, f);
            fclose(f);
        }
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
        llama_token t = best;
        set_tokens(batch, &t, 1, n_pos);
        n_tokens = 1;
    }
    json += "]}\n";
    std::ofstream jf(out + ".json");
    jf << json;
    llama_batch_ext_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
