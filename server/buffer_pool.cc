// buffer_pool.cc: see buffer_pool.h.
#include "server/buffer_pool.h"

#include <bit>
#include <cstdlib>
#include <new>

namespace jobfs::server {

BufferPool::BufferPool(size_t keep_bytes) : state_(std::make_shared<State>()) { state_->limit = keep_bytes; }

BufferPool::State::~State() {
    for (auto& [capacity, p] : idle) std::free(p);
}

std::shared_ptr<IoBuffer> BufferPool::get(size_t size) {
    const size_t capacity = std::bit_ceil(std::max(size, kMinCapacity));
    uint8_t* p = nullptr;
    {
        std::lock_guard l(state_->mu);
        auto it = state_->idle.find(capacity);
        if (it != state_->idle.end()) {
            p = it->second;
            state_->idle.erase(it);
            state_->kept -= capacity;
        }
    }
    if (!p) {
        p = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, capacity));
        if (!p) throw std::bad_alloc();
    }
    return std::shared_ptr<IoBuffer>(new IoBuffer(state_, p, size, capacity));
}

IoBuffer::~IoBuffer() {
    {
        std::lock_guard l(pool_->mu);
        if (pool_->kept + capacity_ <= pool_->limit) {
            pool_->idle.emplace(capacity_, p_);
            pool_->kept += capacity_;
            return;
        }
    }
    std::free(p_);
}

} // namespace jobfs::server
