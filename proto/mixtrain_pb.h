// Include this, not the generated mixtrain.pb.h: ONNX's generated headers need ONNX_API first.
#pragma once

#include "onnx/onnx_pb.h"
#include "proto/mixtrain.pb.h"
