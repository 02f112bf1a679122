#pragma once
/// How a model file's bytes reach memory.

namespace tf::model {

/// map: a private file mapping (lazy, shares the page cache, starts at once); read: a copy read
/// at start into anonymous memory on transparent huge pages, which the CPU matvecs stream faster.
enum class load_mode { map, read };

}  // namespace tf::model
