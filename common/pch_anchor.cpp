// The precompiled header needs one translation unit to be built from; this is it.
#include "attn/pch.hpp"
