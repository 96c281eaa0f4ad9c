# The libraries libforkload is built with: one table, read by configure.ac
# (which checks each with pkg-config) and by setup.py (pip's build, which
# parses these lines), so that the two builds agree.
# FL_LIBRARY(shell name, pkg-config module, least version (empty: any),
#   config.h macro (empty: needed, configure fails without it), Debian's
#   package, what a build without it lacks)
# An optional library gets configure's --without-NAME and make's
# conditional of its macro's name.
FL_LIBRARY([uv], [libuv], [1.44], [], [libuv1-dev], [])
FL_LIBRARY([jpeg], [libjpeg], [], [HAVE_LIBJPEG], [libjpeg-dev],
  [JPEG images])
FL_LIBRARY([spng], [spng], [], [HAVE_SPNG], [libspng-dev], [PNG images])
FL_LIBRARY([webp], [libwebp], [], [HAVE_WEBP], [libwebp-dev],
  [WebP images])
FL_LIBRARY([tiff], [libtiff-4], [4.5], [HAVE_TIFF], [libtiff-dev],
  [TIFF images])
FL_LIBRARY([lmdb], [lmdb], [], [HAVE_LMDB], [liblmdb-dev],
  [LMDB databases])
FL_LIBRARY([archive], [libarchive], [], [HAVE_LIBARCHIVE], [libarchive-dev],
  [WebDataset shards])
