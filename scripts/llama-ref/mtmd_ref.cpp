// Reference dumper for Cera's media fixtures, linked against a llama.cpp build (libllama, libmtmd).
// For one prompt with `<__media__>` markers and the media files that fill them: tokenizes as
// llama-mtmd-cli does (add special, parse special, mtmd's chunks), writes every chunk (text
// tokens, or the media's projected embeddings), then evaluates the chunks and greedy-decodes N
// tokens, recording each token and the top-2 logits at that step, as dump_ref does.
//
//   mtmd_ref MODEL MMPROJ PROMPT_FILE N_PREDICT OUT_PREFIX MEDIA...
//   (a MEDIA path ending in .f32: raw 16 kHz mono f32 samples; with CERA_REF_PCM set, each
//   audio file's decoded samples also go to OUT_PREFIX.pcmI.f32)
//   -> OUT_PREFIX.embd (f32 LE: every media chunk's embeddings, n_tokens x n_embd, in order)
//      OUT_PREFIX.json {"chunks": [{"type": "text", "tokens": [...]} | {"type": "image"|"audio",
//                       "n_tokens": N}], "encode_ms": [...], "top": [[id, logit], ...] (the first
//                       step's 64 largest logits), "steps": [{token, top1, second, top2}]}
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

#include <algorithm>
#include <chrono>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    std::setlocale(LC_NUMERIC, "C");
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL MMPROJ PROMPT_FILE N_PREDICT OUT_PREFIX MEDIA...\n", argv[0]);
        return 2;
    }
    std::ifstream pf(argv[3], std::ios::binary);
    std::stringstream ss;
    ss << pf.rdbuf();
    const std::string prompt = ss.str();
    const int n_predict = std::stoi(argv[4]);
    const std::string out = argv[5];
    const int n_threads = getenv("CERA_REF_THREADS") ? atoi(getenv("CERA_REF_THREADS")) : 2;

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    // no weight repacking: the AMX path of a native build faults on VMs that hide AMX state
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load model\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const int n_embd = llama_model_n_embd_inp(model);

    mtmd_context_params mparams = mtmd_context_params_default();
    mparams.use_gpu = false;
    mparams.n_threads = n_threads;
    mparams.print_timings = false;
    mparams.warmup = false;
    mtmd_context * mctx = mtmd_init_from_file(argv[2], model, mparams);
    if (!mctx) { fprintf(stderr, "cannot load mmproj\n"); return 1; }

    std::vector<mtmd_bitmap *> bitmaps;
    for (int i = 6; i < argc; ++i) {
        const std::string path = argv[i];
        mtmd_bitmap * bm = nullptr;
        if (path.size() > 4 && path.compare(path.size() - 4, 4, ".f32") == 0) {
            // raw 16 kHz mono f32 samples (little-endian): the encoder from given samples
            std::ifstream af(path, std::ios::binary);
            std::vector<char> raw((std::istreambuf_iterator<char>(af)), std::istreambuf_iterator<char>());
            std::vector<float> pcm(raw.size() / sizeof(float));
            memcpy(pcm.data(), raw.data(), pcm.size() * sizeof(float));
            bm = mtmd_bitmap_init_from_audio(pcm.size(), pcm.data());
        } else {
            mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_file(mctx, argv[i], false, mtmd_helper_init_opt_default());
            bm = w.bitmap;
        }
        if (!bm) { fprintf(stderr, "cannot load media %s\n", argv[i]); return 1; }
        if (mtmd_bitmap_is_audio(bm) && getenv("CERA_REF_PCM")) {
            // the samples mtmd decoded (and resampled to 16 kHz), for the decoder's comparison
            FILE * pf2 = fopen((out + ".pcm" + std::to_string(bitmaps.size()) + ".f32").c_str(), "wb");
            fwrite(mtmd_bitmap_get_data(bm), 1, mtmd_bitmap_get_n_bytes(bm), pf2);
            fclose(pf2);
        }
        bitmaps.push_back(bm);
    }
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    mtmd_input_text text = { prompt.c_str(), prompt.size(), true, true };
    const int32_t rc = mtmd_tokenize(mctx, chunks, &text, (const mtmd_bitmap **) bitmaps.data(), bitmaps.size());
    if (rc != 0) { fprintf(stderr, "mtmd_tokenize failed: %d\n", rc); return 1; }

    size_t n_total = 0;
    std::string json = "{\"chunks\":[";
    std::string times = "\"encode_ms\":[";
    FILE * ef = fopen((out + ".embd").c_str(), "wb");
    for (size_t c = 0; c < mtmd_input_chunks_size(chunks); ++c) {
        const mtmd_input_chunk * ch = mtmd_input_chunks_get(chunks, c);
        if (c) json += ",";
        const size_t n = mtmd_input_chunk_get_n_tokens(ch);
        n_total += n;
        if (mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t nt = 0;
            const llama_token * t = mtmd_input_chunk_get_tokens_text(ch, &nt);
            json += "{\"type\":\"text\",\"tokens\":[";
            for (size_t i = 0; i < nt; ++i) json += (i ? "," : "") + std::to_string(t[i]);
            json += "]}";
        } else {
            const bool audio = mtmd_input_chunk_get_type(ch) == MTMD_INPUT_CHUNK_TYPE_AUDIO;
            const auto t0 = std::chrono::steady_clock::now();
            if (mtmd_encode_chunk(mctx, ch)) { fprintf(stderr, "encode failed\n"); return 1; }
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            times += (times.back() == '[' ? "" : ",") + std::to_string(ms);
            fwrite(mtmd_get_output_embd(mctx), sizeof(float), n * n_embd, ef);
            json += std::string("{\"type\":\"") + (audio ? "audio" : "image") + "\",\"n_tokens\":" + std::to_string(n) + "}";
        }
    }
    fclose(ef);
    json += "]," + times + "],\"n_embd\":" + std::to_string(n_embd) + ",\"steps\":[";

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = std::max<size_t>(4096, n_total + n_predict + 8);
    cp.n_ubatch = 2048;
    cp.n_batch = 2048;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }
    llama_pos n_past = 0;
    if (mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 2048, true, &n_past)) { fprintf(stderr, "eval failed\n"); return 1; }

    llama_batch_ext * batch = llama_batch_ext_init(ctx);
    for (int step = 0; step < n_predict; ++step) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        int best = 0, second = -1;
        for (int i = 1; i < n_vocab; ++i) {
            if (logits[i] > logits[best]) { second = best; best = i; }
            else if (second < 0 || logits[i] > logits[second]) { second = i; }
        }
        if (step == 0) {
            std::vector<int> ids(n_vocab);
            for (int i = 0; i < n_vocab; ++i) ids[i] = i;
            std::partial_sort(ids.begin(), ids.begin() + 64, ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
            std::string top = "\"top\":[";
            for (int i = 0; i < 64; ++i) {
                char t[64];
                snprintf(t, sizeof(t), "%s[%d,%.6f]", i ? "," : "", ids[i], logits[ids[i]]);
                top += t;
            }
            json.insert(json.rfind("\"steps\""), top + "],");
        }
        char buf[160];
        snprintf(buf, sizeof(buf), "%s{\"token\":%d,\"top1\":%.6f,\"second\":%d,\"top2\":%.6f}",
                 step ? "," : "", best, logits[best], second, logits[second]);
        json += buf;
        if (llama_vocab_is_eog(vocab, best) || step + 1 == n_predict) break;
        llama_batch_ext_clear(batch);
        const int32_t idx = llama_batch_ext_add_token(batch, 0, best);
        llama_batch_ext_set_pos(batch, idx, &n_past);
        llama_batch_ext_set_output_logits(batch, 0, true);
        if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        n_past += 1;
    }
    json += "]}\n";
    std::ofstream jf(out + ".json");
    jf << json;
    llama_batch_ext_free(batch);
    mtmd_input_chunks_free(chunks);
    for (auto * b : bitmaps) mtmd_bitmap_free(b);
    mtmd_free(mctx);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
