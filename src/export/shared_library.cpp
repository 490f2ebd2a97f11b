// libqhexrt_export.so is made of the export and doctor layers' objects (src/CMakeLists.txt,
// qhx_shared_library); a shared library target needs one source of its own, and this is it.
