"""Array and table files: HDF5 (:mod:`.hdf5`), Zarr (:mod:`.zarr`), ``.npy`` (:mod:`.npy`)
Parquet (:mod:`.parquet`) and TFRecord (:mod:`.tfrecord`, :mod:`.tfrecord_wire`); what they share (:mod:`.common`) and the block cache that
keeps their decoded chunks and row groups (:mod:`.blocks`)."""
