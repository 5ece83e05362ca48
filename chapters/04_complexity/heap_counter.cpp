// The counting allocator behind attn::ch04::heap_peak_bytes(): the global operator new and delete,
// replaced. Each block carries its size in a header in front of it, so delete knows what to subtract.
// Thread-safe (atomics); the chapter's allocations all come from one thread, OpenBLAS uses its own.
#include "04_complexity/heap_counter.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<std::size_t> live{0};
std::atomic<std::size_t> peak{0};

// The header in front of every block: big enough for the size and for the block's alignment.
constexpr std::size_t kHeader = alignof(std::max_align_t);

void count_alloc(std::size_t size) {
  const std::size_t now = live.fetch_add(size, std::memory_order_relaxed) + size;
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

// One allocation: \p align bytes of header (holding the size), then the block, aligned to \p align.
void* allocate(std::size_t size, std::size_t align) {
  const std::size_t header = std::max(kHeader, align);
  void* raw = nullptr;
  if (posix_memalign(&raw, header, header + size) != 0) return nullptr;
  auto* block = static_cast<unsigned char*>(raw) + header;
  reinterpret_cast<std::size_t*>(block)[-1] = size;
  reinterpret_cast<std::size_t*>(block)[-2] = header;
  count_alloc(size);
  return block;
}

void release(void* ptr) noexcept {
  if (ptr == nullptr) return;
  auto* block = static_cast<unsigned char*>(ptr);
  const std::size_t size = reinterpret_cast<std::size_t*>(block)[-1];
  const std::size_t header = reinterpret_cast<std::size_t*>(block)[-2];
  live.fetch_sub(size, std::memory_order_relaxed);
  std::free(block - header);
}

void* allocate_or_throw(std::size_t size, std::size_t align) {
  if (void* p = allocate(size, align)) return p;
  throw std::bad_alloc();
}

}  // namespace

namespace attn::ch04 {

std::size_t heap_live_bytes() { return live.load(std::memory_order_relaxed); }
std::size_t heap_peak_bytes() { return peak.load(std::memory_order_relaxed); }
void reset_heap_peak() { peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace attn::ch04

// The replaceable global allocation functions ([new.delete]): every form routes to allocate/release.
void* operator new(std::size_t size) { return allocate_or_throw(size, kHeader); }
void* operator new[](std::size_t size) { return allocate_or_throw(size, kHeader); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, kHeader); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, kHeader); }
void* operator new(std::size_t size, std::align_val_t align) {
  return allocate_or_throw(size, static_cast<std::size_t>(align));
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return allocate_or_throw(size, static_cast<std::size_t>(align));
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return allocate(size, static_cast<std::size_t>(align));
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  return allocate(size, static_cast<std::size_t>(align));
}
void operator delete(void* ptr) noexcept { release(ptr); }
void operator delete[](void* ptr) noexcept { release(ptr); }
void operator delete(void* ptr, std::size_t) noexcept { release(ptr); }
void operator delete[](void* ptr, std::size_t) noexcept { release(ptr); }
void operator delete(void* ptr, const std::nothrow_t&) noexcept { release(ptr); }
void operator delete[](void* ptr, const std::nothrow_t&) noexcept { release(ptr); }
void operator delete(void* ptr, std::align_val_t) noexcept { release(ptr); }
void operator delete[](void* ptr, std::align_val_t) noexcept { release(ptr); }
void operator delete(void* ptr, std::size_t, std::align_val_t) noexcept { release(ptr); }
void operator delete[](void* ptr, std::size_t, std::align_val_t) noexcept { release(ptr); }
void operator delete(void* ptr, std::align_val_t, const std::nothrow_t&) noexcept { release(ptr); }
void operator delete[](void* ptr, std::align_val_t, const std::nothrow_t&) noexcept { release(ptr); }
