// What checkpoint loading (runtime/trainer_checkpoint.cc) shares with the data-parallel start-up
// check in runtime/trainer.cc: the model signature and the config comparison. Internal to the
// runtime; the checkpoint file format itself is EncodeCheckpoint/DecodeCheckpoint in trainer.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/message.h"
#include "graph/graph.h"
#include "proto/mixtrain_pb.h"

namespace mixtrain {

// 64-bit FNV-1a of `bytes`, continuing from `h` (start with 0xcbf29ce484222325).
uint64_t Fnv1a(uint64_t h, std::string_view bytes);

// The trainable parameters (name, dtype, dims) and the prepared graph's op types, hashed.
// `params` are looked up in `step` (LoRA adapters exist only there), the op types in `model`.
pb::ModelSignature SignModel(const Graph& model, const Graph& step, const std::vector<std::string>& params);

// Appends "optimizer.kind is ADAM in the checkpoint, ADAMW in this run" to `out` for every field
// that differs between two configs (unset fields count as their default; fields a resumed run
// may change are skipped). `prefix` names the message's place in the whole config.
void ConfigDifferences(const google::protobuf::Message& saved, const google::protobuf::Message& mine,
                       const std::string& prefix, std::vector<std::string>& out,
                       const char* saved_where = "in the checkpoint",
                       const char* mine_where = "in this run");

}  // namespace mixtrain
