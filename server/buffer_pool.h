// buffer_pool.h: recycled, page-aligned buffers for the chunk data a daemon receives and sends.
//
// Why: a chunk request moves up to a chunk (4 MiB) at a time, and writes with O_DIRECT
// (chunk_store.h) need page-aligned memory. A page-aligned allocation of that size per request
// is a fresh mapping whose every page faults on first touch: reading 1 GiB through three
// daemons took 3.9 s that way, 1.24 s with plain malloc (which reuses its memory, unaligned),
// 0.8 s with this pool. So buffers are rounded up
// to a power of two (64 KiB at least), kept when released (up to `keep_bytes` in all) and
// handed out again.
//
// Thread safety: get() and the release of a buffer may happen on any thread; a buffer may
// outlive the pool (it then frees itself).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>

namespace jobfs::server {

class IoBuffer;

class BufferPool {
public:
    static constexpr size_t kAlignment = 4096;
    static constexpr size_t kMinCapacity = 64 * 1024;

    explicit BufferPool(size_t keep_bytes);
    BufferPool(const BufferPool&) = delete;
    BufferPool& operator=(const BufferPool&) = delete;

    // A buffer of `size` bytes (contents undefined), page-aligned.
    std::shared_ptr<IoBuffer> get(size_t size);

private:
    friend class IoBuffer;
    struct State {
        std::mutex mu;
        std::multimap<size_t, uint8_t*> idle; // by capacity
        size_t kept = 0;
        size_t limit = 0;
        ~State();
    };
    std::shared_ptr<State> state_;
};

class IoBuffer {
public:
    ~IoBuffer();
    IoBuffer(const IoBuffer&) = delete;
    IoBuffer& operator=(const IoBuffer&) = delete;
    uint8_t* data() { return p_; }
    const uint8_t* data() const { return p_; }
    size_t size() const { return size_; }
    operator std::span<uint8_t>() { return {p_, size_}; }
    operator std::span<const uint8_t>() const { return {p_, size_}; }

private:
    friend class BufferPool;
    IoBuffer(std::shared_ptr<BufferPool::State> pool, uint8_t* p, size_t size, size_t capacity)
        : pool_(std::move(pool)), p_(p), size_(size), capacity_(capacity) {}
    std::shared_ptr<BufferPool::State> pool_;
    uint8_t* p_;
    size_t size_;
    size_t capacity_;
};

} // namespace jobfs::server
