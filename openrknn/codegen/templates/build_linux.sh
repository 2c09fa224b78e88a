#!/bin/sh
# Build the demo. Cross-compiling for a board: GCC_COMPILER=aarch64-linux-gnu RKNN_RT_LIB=/path/librknnrt.so
# PC build check without an NPU: ./build_linux.sh stub
set -e
cd "$(dirname "$0")"
EXTRA=""
if [ "$1" = "stub" ]; then EXTRA="-DOPENRKNN_STUB_RUNTIME=ON"; fi
if [ -n "$GCC_COMPILER" ]; then EXTRA="$EXTRA -DCMAKE_CXX_COMPILER=${GCC_COMPILER}-g++"; fi
if [ -n "$RKNN_RT_LIB" ]; then EXTRA="$EXTRA -DRKNN_RT_LIB=$RKNN_RT_LIB"; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=install $EXTRA
cmake --build build -j4
cmake --install build
echo "built: install/rknn_app_demo (run it from install/)"
