#!/bin/sh
# Build the demo for Android: ANDROID_NDK_PATH=/path/to/ndk RKNN_RT_LIB=/path/to/arm64-v8a/librknnrt.so
set -e
cd "$(dirname "$0")"
: "${ANDROID_NDK_PATH:?set ANDROID_NDK_PATH to the Android NDK}"
: "${RKNN_RT_LIB:?set RKNN_RT_LIB to the Android librknnrt.so}"
cmake -S . -B build-android -DCMAKE_TOOLCHAIN_FILE="$ANDROID_NDK_PATH/build/cmake/android.toolchain.cmake" \
      -DANDROID_ABI=arm64-v8a -DANDROID_PLATFORM=android-24 -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX=install-android -DRKNN_RT_LIB="$RKNN_RT_LIB"
cmake --build build-android -j4
cmake --install build-android
