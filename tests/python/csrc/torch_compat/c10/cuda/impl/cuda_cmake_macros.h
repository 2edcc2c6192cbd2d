// Debian's libtorch-dev ships c10/cuda's headers without the one its CMake
// build generates; the extension's syntax check needs it to exist only.
#pragma once
