// The device layer's types as the allocator names them: the allocator works over the VMM
// and stream/event interfaces of device/ and adds none of its own.
#pragma once

#include "device/stream_events.hpp"
#include "device/vmm.hpp"

namespace sublinear::allocator {

using device::chunk_handle;
using device::event_handle;
using device::stream_events;
using device::stream_handle;
using device::vmm;
using device::vmm_range;
using device::vmm_status;

}  // namespace sublinear::allocator
