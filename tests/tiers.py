"""The test tiers: one table of which tests are slow, start processes, need the GPU path or
build packages. ``tests/conftest.py`` turns it into markers when pytest collects.

Each tier is a marker registered in ``pyproject.toml``; ``bash scripts/test.sh --fast``
deselects all four (``-m "not slow and not subprocess and not gpu and not packaging"``),
``bash scripts/test.sh`` (CI) runs everything. An entry is a folder (``tests/gpu/``), a
file (``tests/repo/test_wheel.py``) or one test of a file (``tests/test_cli.py::test_bench``,
every parametrization of it; ``file::Class::test`` for a method). A test may be in several
tiers. ``tests/repo/test_tiers.py`` fails when an entry names a file or a test that no longer
exists, so the table cannot rot; docs/testing.md says how it was measured.

Tiers:
    slow        over about one second on a loaded 2-core machine, for another reason
    subprocess  starts processes: torchrun, a child Python, the CLI
    gpu         the GPU path: tests/gpu (CPU stand-ins without a GPU) and tests that need CUDA
    packaging   builds an sdist or a wheel, or installs one
"""

from __future__ import annotations

import itertools
import re

FAST_EXPRESSION = "not slow and not subprocess and not gpu and not packaging"

TIERS: dict[str, tuple[str, ...]] = {
    "slow": (  # over 0.3 s in the full run, over 0.2 s in the fast one: docs/testing.md
        "tests/repo/test_bench_smoke.py",
        "tests/engine/test_chunks.py::test_packs_go_to_decode_tensors_in_one_call_per_batch_with_the_per_sample_batches",
        "tests/engine/test_chunks.py::test_refused_images_are_decoded_on_the_cpu_in_their_places",
        "tests/engine/test_chunks.py::test_per_sample_positions_and_bad_samples_join_the_packs_in_order",
        "tests/engine/test_chunks.py::test_a_batch_is_resized_on_a_second_thread_while_the_next_one_decodes",
        "tests/engine/test_chunks.py::test_a_gpu_feed_pass_reuses_a_few_buffers_with_every_image_intact",
        "tests/engine/test_chunks.py::test_a_ranks_chunks_give_the_per_sample_path_batches",
        "tests/ray/test_on_ray.py",
        "tests/ray/test_cluster.py",
        "tests/engine/test_scan_verdicts.py",
        "tests/io/stores/test_credentials.py::test_azure_from_the_connection_string_variable_under_every_spelling",
        "tests/io/stores/test_credentials.py::test_use_development_storage_reaches_azurite",
        "tests/io/stores/test_credentials.py::test_a_missing_azure_prefix_or_blob_is_named",
        "tests/decode/test_cpu.py::test_truncated_real_jpeg_and_png_raise",
        "tests/torch/test_loader.py::test_normalized_output_equals_normalized_uint8",
        "tests/test_bench_numpy.py",
        "tests/dali/test_docs.py",
        "tests/dali/test_objects.py",
        "tests/dali/test_reader.py",
        "tests/decode/test_cpu.py::test_imagenet_like_jpegs_match_pillow_exactly",
        "tests/decode/test_jpeg_sizes_native.py::test_it_decides_the_usual_jpegs_and_leaves_the_rest",
        "tests/decode/test_jpeg_sizes_native.py::test_where_it_decides_it_says_what_probe_size_says",
        "tests/decode/test_max_pixels.py::test_gpu_header_path_refuses_before_the_decoder",
        "tests/decode/test_max_pixels.py::test_loader_limit_is_configurable",
        "tests/decode/test_max_pixels.py::test_replace_delivers_full_batches_and_counts_each_bomb_once",
        "tests/decode/test_native.py::test_dct_scale_is_close_to_the_full_size_path",
        "tests/decode/test_native.py::test_imagenet_like_random_resized_crops_match_the_python_path",
        "tests/decode/test_native.py::test_loader_batches_are_the_same_with_and_without_native",
        "tests/decode/test_native.py::test_pipeline_samples_are_the_same_with_and_without_native",
        "tests/decode/test_native.py::test_random_boxes_on_every_kind_of_jpeg",
        "tests/decode/test_native.py::test_threads_share_nothing",
        "tests/decode/test_native_arrays.py::test_loader_over_npy_gives_the_same_batches_with_and_without_the_extension",
        "tests/decode/test_native_arrays.py::test_random_boxes_give_the_python_paths_bytes",
        "tests/decode/test_native_windows.py::test_native_windows_equal_python_and_numpy_to_the_bit",
        "tests/decode/test_orientation.py::test_loader_applies_exif_orientation",
        "tests/engine/test_checked.py::test_threads_marking_at_once_never_lose_or_invent_a_mark",
        "tests/engine/test_chunks.py::test_a_gpu_loop_left_early_stops_its_batch_thread",
        "tests/engine/test_chunks.py::test_a_read_error_is_a_storage_error_naming_the_shard",
        "tests/engine/test_chunks.py::test_an_error_in_the_ahead_batch_reaches_the_consumer_in_order",
        "tests/engine/test_chunks.py::test_bad_samples_take_the_per_sample_policy",
        "tests/engine/test_chunks.py::test_chunks_give_the_per_sample_path_batches_bit_for_bit",
        "tests/engine/test_chunks.py::test_gpu_batches_are_decoded_one_ahead_on_their_own_thread",
        "tests/engine/test_chunks.py::test_gpu_feed_per_chunk_gives_the_per_sample_feed_batches",
        "tests/engine/test_chunks.py::test_gpu_feed_per_chunk_keeps_bad_samples_from_the_decoder",
        "tests/engine/test_chunks.py::test_one_native_call_per_chunk",
        "tests/engine/test_chunks.py::test_raise_names_the_shard_and_key",
        "tests/engine/test_chunks.py::test_samples_the_dataset_knows_are_bad_go_to_the_per_sample_path",
        "tests/engine/test_chunks.py::test_the_first_failed_read_of_a_chunk_is_the_one_named",
        "tests/base/test_counters.py::test_adds_from_many_threads_are_all_counted",
        "tests/base/test_executor.py::test_an_idle_thread_keeps_nothing_of_its_last_task_alive",
        "tests/base/test_executor.py::test_close_cancels_waiting_calls_and_refuses_new_ones",
        "tests/base/test_executor.py::test_close_never_hangs_on_a_stuck_call",
        "tests/engine/test_slots.py::test_a_lent_slot_comes_back_only_when_every_tensor_over_it_is_gone",
        "tests/engine/test_slots.py::test_kept_batches_never_change_and_slots_are_reused_when_dropped",
        "tests/gds/test_dataset.py::test_local_file_list_and_dataloader",
        "tests/gds/test_dataset.py::test_s3_object_replaced_after_listing_is_read_whole_from_the_new_version",
        "tests/gds/test_dataset.py::test_s3_prefix_and_urls",
        "tests/gds/test_large.py",
        "tests/gds/test_memory.py::test_close_stops_a_transfer_between_chunks",
        "tests/gds/test_memory.py::test_closing_the_pool_wakes_a_waiter_with_an_error",
        "tests/gds/test_memory.py::test_first_error_stops_the_rest_and_waits_for_running_chunks",
        "tests/gds/test_memory.py::test_pool_is_bounded_lazy_and_reuses_buffers",
        "tests/gds/test_objects.py::test_async_errors_come_from_the_future",
        "tests/gds/test_objects.py::test_async_round_trip",
        "tests/gds/test_objects.py::test_buffer_too_small_names_object_and_sizes",
        "tests/gds/test_objects.py::test_failed_multipart_upload_leaves_no_object",
        "tests/gds/test_objects.py::test_other_host_buffers",
        "tests/gds/test_objects.py::test_partial_reads_with_offset_and_size",
        "tests/gds/test_objects.py::test_round_trip_through_host_buffers",
        "tests/gds/test_objects.py::test_without_async_the_future_is_already_done",
        "tests/gds/test_staged.py::test_device_failure_mid_upload_leaves_no_object",
        "tests/gds/test_staged.py::test_device_failure_mid_write_leaves_no_file",
        "tests/gds/test_staged.py::test_object_round_trip_through_staging",
        "tests/gds/test_threads.py::test_close_during_a_many_chunk_transfer_cancels_without_hanging",
        "tests/io/arrays/test_hdf5.py::test_threads_read_concurrently",
        "tests/io/arrays/test_parquet.py::test_hugging_face_layout",
        "tests/io/arrays/test_zarr.py::test_corrupt_chunk_is_a_sample_error",
        "tests/io/arrays/test_zarr.py::test_missing_array_lists_what_exists",
        "tests/io/arrays/test_zarr.py::test_pixels_labels_keys",
        "tests/io/arrays/test_zarr.py::test_v2_and_v3_stores_read_alike",
        "tests/io/arrays/test_zarr.py::test_wrong_dtype_and_short_labels",
        "tests/io/local/test_compressed_bound.py::test_a_gzip_bomb_stops_at_the_bound_with_a_storage_error",
        "tests/io/local/test_compressed_bound.py::test_a_streamed_copy_waits_for_room_another_process_holds_and_a_plain_read_does_not",
        "tests/io/local/test_compressed_bound.py::test_copies_not_in_use_are_evicted_so_shards_larger_than_the_bound_take_turns",
        "tests/io/local/test_entry_points.py",
        "tests/io/local/test_folder.py::test_labels_and_order_match_torchvision",
        "tests/io/local/test_folder.py::test_reads_are_the_file_bytes",
        "tests/io/local/test_members.py::test_member_arrays_are_small_flat_and_consistent",
        "tests/io/local/test_ranges.py::test_by_default_256_shards_all_stay_open",
        "tests/io/local/test_shards_reported.py::test_compressed_shards_beside_plain_ones_are_read",
        "tests/io/local/test_storage_faults.py::test_a_shard_changed_before_its_turn_raises_storage_error",
        "tests/io/local/test_storage_faults.py::test_a_shard_changed_while_it_is_read_raises_storage_error",
        "tests/io/local/test_tar.py::test_a_shard_cut_short_during_a_pass_is_a_storage_error_then_reindexed",
        "tests/io/local/test_tar.py::test_index_matches_tarfile",
        "tests/io/local/test_tar.py::test_loader_batches_are_the_same_with_and_without_mapped_shards",
        "tests/io/local/test_tar.py::test_truncated_mid_member",
        "tests/io/local/test_tarscan.py::test_cut_and_corrupt_copies_index_as_tarfile_says",
        "tests/io/local/test_tarscan.py::test_extended_headers_go_to_tarfile_or_agree",
        "tests/io/local/test_tarscan.py::test_window_reads_exact_ranges_across_refills",
        "tests/io/local/test_tarscan_webdataset.py::test_tarwriter_shards_index_as_tarfile_reads_them",
        "tests/io/stores/test_s3_compressed.py::test_a_plain_copy_over_the_bound_raises_whatever_on_damage_says",
        "tests/io/stores/test_s3_compressed.py::test_a_second_dataset_reuses_the_plain_copy_and_index",
        "tests/io/stores/test_s3_compressed.py::test_bz2_and_xz_are_read_and_zstd_is_reported",
        "tests/io/stores/test_s3_compressed.py::test_compressed_shards_larger_together_than_the_cache_stream_every_sample_once",
        "tests/io/stores/test_s3_compressed.py::test_copies_take_turns_in_a_cache_for_one_and_one_in_use_elsewhere_is_never_evicted",
        "tests/io/stores/test_s3_compressed.py::test_epoch_over_gz_and_tgz_matches_the_plain_shards_each_fetched_once",
        "tests/io/stores/test_s3_dataset.py",
        "tests/io/stores/test_s3_members.py",
        "tests/io/stores/test_s3_storage_faults.py",
        "tests/io/stores/test_s3_trust.py",
        "tests/io/stores/test_s3client.py",
        "tests/io/stores/test_streaming.py::test_an_epoch_streams_every_sample_once_and_each_shard_once",
        "tests/io/stores/test_streaming.py::test_blocks_shuffle_within_the_cache_and_epochs_differ",
        "tests/io/stores/test_streaming.py::test_elastic_resume_on_another_world_size",
        "tests/io/stores/test_streaming.py::test_ranks_of_a_node_share_its_downloads",
        "tests/io/stores/test_streaming.py::test_resume_mid_epoch_continues_exactly",
        "tests/io/stores/test_streaming.py::test_small_data_is_not_streamed_unless_asked",
        "tests/io/stores/test_streaming.py::test_streaming_with_a_cache_smaller_than_two_shards_is_refused_at_construction",
        "tests/io/stores/test_streaming.py::test_two_nodes_read_disjoint_shards",
        "tests/io/stores/test_streaming_mix.py",
        "tests/io/stores/test_streaming_pieces.py::test_an_elastic_resume_of_pieces_reads_the_rest_once",
        "tests/io/stores/test_streaming_pieces.py::test_an_epoch_of_pieces_reads_every_sample_once_and_each_piece_once",
        "tests/io/stores/test_streaming_pieces.py::test_an_object_replaced_mid_epoch_raises_a_storage_error",
        "tests/io/stores/test_streaming_pieces.py::test_resampled_and_weighted_epochs_of_pieces_stay_within_the_cache",
        "tests/io/stores/test_streaming_pieces.py::test_resume_mid_epoch_is_exact_and_an_old_state_keeps_whole_shards",
        "tests/io/stores/test_streaming_pieces.py::test_the_ranks_of_a_node_share_its_pieces",
        "tests/io/stores/test_streaming_resampled.py",
        "tests/io/stores/test_zarr_s3.py",
        "tests/io/stores/test_credentials.py::test_a_missing_gcs_prefix_or_object_is_named",
        "tests/io/stores/test_credentials.py::test_a_wrong_endpoint_fails_in_seconds_naming_where_to_fix_it",
        "tests/io/stores/test_credentials.py::test_gcs_from_storage_emulator_host_as_googles_clients_take_it",
        "tests/io/stores/test_http_and_index.py::test_a_token_header_reaches_the_server_and_without_it_the_dataset_says_so",
        "tests/io/stores/test_http_and_index.py::test_an_http_server_is_not_listed_and_the_error_says_how_to_name_shards",
        "tests/io/stores/test_http_and_index.py::test_missing_http_shards_are_named_when_the_dataset_is_built",
        "tests/io/stores/test_http_versions.py",
        "tests/io/stores/test_secrets_everywhere.py::test_a_web_server_epoch_inspect_and_index_show_and_write_no_secret",
        "tests/io/stores/test_secrets_everywhere.py::test_an_azurite_epoch_shows_and_writes_no_account_key",
        "tests/io/stores/test_secrets_everywhere.py::test_an_s3_epoch_doctor_inspect_and_index_show_and_write_no_secret",
        "tests/io/stores/test_secrets_everywhere.py::test_construction_shows_no_secret",
        "tests/io/stores/test_secrets_everywhere.py::test_refused_urls_and_failing_connections_show_no_secret",
        "tests/io/test_bucket_sizes_s3.py",
        "tests/io/test_dataset_index.py::test_damage_raises_and_label_errors_read_the_same",
        "tests/io/test_dataset_index.py::test_describe_names_a_list_by_its_first_path_and_count",
        "tests/io/test_dataset_index.py::test_loader_epochs_are_the_same_with_and_without_the_index",
        "tests/io/test_dataset_index.py::test_local_shards_without_an_index_get_one_without_a_hint",
        "tests/io/test_dataset_index.py::test_s3_index_beside_the_prefix_starts_without_reading_a_shard",
        "tests/io/test_dataset_index.py::test_s3_index_copy_damaged_in_the_cache_is_refused_then_downloaded_again",
        "tests/io/test_dataset_index.py::test_s3_index_copy_in_a_cache_others_can_write_is_not_used",
        "tests/io/test_dataset_index.py::test_s3_replaced_object_falls_back_with_a_warning_and_its_new_bytes",
        "tests/io/test_dataset_index.py::test_s3_without_put_rights_the_index_goes_to_the_cache",
        "tests/io/test_dataset_index.py::test_tables_labels_and_reads_equal_the_per_shard_path",
        "tests/io/test_dataset_index.py::test_the_file_is_compact_and_mapped_in_narrow_dtypes",
        "tests/io/test_formats.py::test_epochs_match_the_tar_source",
        "tests/io/test_formats.py::test_ranks_and_resume_match_the_tar_source",
        "tests/io/test_index_memory.py::test_damaged_shards_are_reported_as_with_the_automatic_index",
        "tests/io/test_index_parts.py::test_a_benchmark_shaped_shard_of_many_samples",
        "tests/io/test_index_parts.py::test_a_part_equals_the_per_sample_path",
        "tests/io/test_index_trust.py::test_a_flipped_byte_in_the_index_is_refused_with_one_warning",
        "tests/io/test_index_trust.py::test_the_loaders_take_an_explicit_index",
        "tests/io/test_labels.py::test_an_image_folder_beside_named_labels_numbers_them_by_its_folders",
        "tests/io/test_labels.py::test_an_integer_label_must_be_an_id_of_the_classes_given",
        "tests/io/test_paths.py::test_s3_url_without_credentials_or_endpoint_fails_fast_naming_it",
        "tests/plan/test_mixing.py::test_default_is_cheap_at_10m_samples_100k_shards",
        "tests/plan/test_mixing.py::test_large_weighted_mix_is_cheap",
        "tests/plan/test_order.py::test_equal_steps_on_every_rank",
        "tests/plan/test_overlap.py::test_the_holds_fit_the_cache_with_the_reads_ahead",
        "tests/plan/test_pieces.py::test_the_pieces_held_fit_the_cache_with_the_reads_ahead",
        "tests/plan/test_resampled.py::test_a_rank_sees_exactly_what_rank_order_gives_for_the_same_global_order",
        "tests/plan/test_resampled.py::test_every_sample_has_the_same_expected_count_and_no_empty_shard_is_drawn",
        "tests/plan/test_streaming.py::test_large_orders_are_fast_enough",
        "tests/plan/test_streaming_resampled.py::test_a_rank_reads_what_stream_rank_order_gives_over_the_whole_order",
        "tests/plan/test_streaming_resampled.py::test_weights_hold_in_expectation_and_samples_of_a_dataset_are_equally_likely",
        "tests/engine/test_bad_images.py::test_gpu_path_refuses_damage_before_the_decoder",
        "tests/engine/test_bad_images.py::test_junk_before_a_marker_is_delivered_as_intact",
        "tests/engine/test_bad_input.py::test_a_long_bad_run_is_replaced_not_fatal",
        "tests/engine/test_bad_input.py::test_pipeline_replaces_a_long_bad_run",
        "tests/engine/test_bad_input.py::test_replacements_wrap_around_the_rank_order",
        "tests/torch/test_buckets.py::test_a_bad_sample_alone_in_its_bucket_drops_that_batch_not_the_run",
        "tests/torch/test_buckets.py::test_a_launcher_seen_after_construction_cuts_and_fingerprints_for_its_world",
        "tests/torch/test_buckets.py::test_an_index_of_the_previous_version_is_refused_and_rebuilt_with_sizes",
        "tests/torch/test_buckets.py::test_fields_batches_and_ratio_buckets_sized_to_an_area",
        "tests/torch/test_buckets.py::test_sizes_behind_a_large_header_and_without_the_index",
        "tests/torch/test_buckets.py::test_two_ranks_take_equal_steps_of_one_bucket",
        "tests/torch/test_compat.py::test_accelerate_prepare_returns_the_loader_and_checkpoints_its_position",
        "tests/torch/test_compat.py::test_accelerate_skip_first_batches_yields_the_rest_of_the_epoch",
        "tests/torch/test_compat.py::test_an_iter_that_yields_nothing_takes_no_epoch",
        "tests/torch/test_compat.py::test_iterating_the_skipping_loader_twice_skips_in_each_epoch",
        "tests/torch/test_compat.py::test_lightning_drives_the_epochs_through_the_sampler",
        "tests/torch/test_compat.py::test_lightning_resumes_mid_epoch_from_a_checkpoint",
        "tests/torch/test_compat.py::test_the_sampler_is_this_ranks_order_of_the_next_epoch",
        "tests/torch/test_compat.py::test_the_skipping_loader_keeps_the_resume_state_exact",
        "tests/test_datasets.py::test_a_dataset_s_classes_number_the_labels_as_the_keyword_does",
        "tests/test_datasets.py::test_a_mix_of_datasets_equals_the_parallel_lists",
        "tests/test_datasets.py::test_a_streamed_dataset_streams_as_the_keyword_does",
        "tests/torch/test_distributed.py::test_elastic_resume_from_two_ranks_to_one",
        "tests/torch/test_distributed.py::test_equal_steps_and_disjoint_cover",
        "tests/torch/test_distributed.py::test_every_rank_reshuffles_identically",
        "tests/engine/test_fields.py::test_a_paired_mask_gets_the_image_crop_and_flip_pixel_for_pixel",
        "tests/torch/test_iteration.py",
        "tests/repo/test_layout.py::test_no_import_cycle_lazy_imports_included",
        "tests/repo/test_layout.py::test_no_private_name_imported_across_packages",
        "tests/torch/test_loader.py::test_distributed_ranks_split_the_epoch",
        "tests/torch/test_loader.py::test_drop_last",
        "tests/torch/test_loader.py::test_epoch_yields_every_sample_once_with_its_label",
        "tests/torch/test_loader.py::test_eval_pixels_match_pillow_resize_then_center_crop",
        "tests/torch/test_loader.py::test_iterating_again_reshuffles_and_set_epoch_repeats",
        "tests/torch/test_loader.py::test_kept_batches_are_never_overwritten",
        "tests/torch/test_loader.py::test_resume_mid_epoch_continues_exactly",
        "tests/torch/test_loader.py::test_same_seed_and_epoch_give_the_same_batches",
        "tests/torch/test_loader.py::test_slots_are_reused_when_batches_are_dropped",
        "tests/torch/test_loader.py::test_stats_and_profile",
        "tests/plan/test_mixing_loader.py::test_a_resampled_epoch_resumes_exactly_and_honours_the_weights",
        "tests/plan/test_mixing_loader.py::test_a_two_billion_sample_resampled_epoch_starts_at_once_in_small_memory",
        "tests/plan/test_mixing_loader.py::test_weights_with_streaming_order",
        "tests/pipeline/test_pipeline.py::test_next_batch_walks_the_epoch_in_storage_order",
        "tests/test_plot.py::test_timeline_is_off_by_default",
        "tests/test_plot.py::test_timeline_records_worker_and_consumer_spans",
        "tests/torch/test_ranks_default.py::test_default_splits_under_a_launcher_and_says_so_once",
        "tests/torch/test_ranks_default.py::test_explicit_rank_wins_and_single_process_stays_whole",
        "tests/torch/test_ranks_default.py::test_false_reads_everything_and_warns_under_a_launcher",
        "tests/torch/test_shutdown.py::test_a_dropped_pipeline_mid_epoch_with_a_transform",
        "tests/torch/test_shutdown.py::test_a_dropped_pipeline_releases_its_threads",
        "tests/torch/test_shutdown.py::test_pipeline_stop_and_context_manager",
        "tests/torch/test_shutdown.py::test_timeout_is_a_deadline_whatever_the_number_of_stuck_threads",
        "tests/torch/test_torch_args.py::test_a_copy_is_the_configuration_and_iterates_the_same_data",
        "tests/torch/test_torch_args.py::test_a_copy_keeps_the_torch_arguments",
        "tests/torch/test_torch_args.py::test_collate_fn_gets_image_label_pairs_as_torch_gives_them",
        "tests/torch/test_torch_args.py::test_generator_seeds_the_order",
        "tests/torch/test_torch_args.py::test_lightning_val_check_interval_with_the_train_loader",
        "tests/torch/test_torch_args.py::test_num_workers_0_decodes_in_the_consumers_thread",
        "tests/torch/test_torch_args.py::test_return_keys_with_collate_fn_gives_the_batch_and_its_keys",
        "tests/torch/test_torch_args.py::test_timeout_raises_for_a_slow_batch_instead_of_hanging",
        "tests/torch/test_torch_args.py::test_two_interleaved_iterators_each_give_their_whole_epoch",
        "tests/torch/test_torch_args.py::test_validation_mid_epoch_with_the_train_loader",
        "tests/testing/test_counting_proxy.py::test_counts_are_exact_under_concurrent_clients",
        "tests/testing/test_counting_proxy.py::test_faults_heads_listings_and_uploads",
        "tests/testing/test_counting_proxy.py::test_whole_and_ranged_gets_are_counted_per_object",
        "tests/transforms/test_draws.py::test_edge_sizes_agree",
        "tests/transforms/test_draws.py::test_offsets_take_every_value_of_randrange_equally_often",
        "tests/transforms/test_draws.py::test_random_resized_crop_distribution_over_100k_draws",
        "tests/transforms/test_draws.py::test_uniforms_equals_the_scalar_draws_bit_for_bit",
        "tests/transforms/test_draws.py::test_windows_equal_window_to_the_bit",
        "tests/transforms/test_normalize.py::test_numpy_torch_and_native_give_the_same_bits",
        "tests/transforms/test_render.py::test_random_resized_crop_matches_pillow_crop_then_resize",
        "tests/transforms/test_render.py::test_resize_center_crop_matches_torchvision_two_step_pil_path",
        "tests/transforms/test_user_callables.py::test_callables_run_on_exactly_the_fused_output",
        "tests/transforms/test_validation.py::test_sensible_arguments_still_work",
    ),
    "subprocess": (  # a child Python, torchrun, the CLI, tar programs, mypy, an emulator process
        "tests/repo/test_bench_smoke.py",
        "tests/dali/test_missing.py",
        "tests/ray/test_on_ray.py",
        "tests/ray/test_cluster.py",
        "tests/decode/test_fuzz_native.py::test_random_crops_and_damaged_jpegs_under_sanitizers",
        "tests/decode/test_native_notice.py",
        "tests/engine/test_slots.py::test_importing_the_slots_does_not_import_torch",
        "tests/gds/test_files.py::test_failed_write_leaves_no_file",
        "tests/gds/test_status.py::test_command_reports_hardware_and_config",
        "tests/gds/test_status.py::test_compat_mode_is_read_from_kvikio_26s_defaults_submodule",
        "tests/gds/test_status.py::test_libcufile_of_the_cuda_13_wheel_is_found",
        "tests/gpu/test_pipeline_gpu.py::test_the_cpu_pipeline_does_not_import_torch",
        "tests/io/local/test_compressed_bound.py::test_a_partial_copy_of_a_killed_process_is_removed_at_the_next_start",
        "tests/io/local/test_file_identity.py::test_a_shard_truncated_between_epochs_is_reindexed_not_a_crash",
        "tests/io/local/test_storage_faults.py::test_a_shard_truncated_mid_pass_raises_and_never_kills_the_process",
        "tests/io/local/test_tarscan_tools.py",
        "tests/io/stores/test_cache.py::test_a_writer_killed_mid_fill_publishes_nothing_and_the_next_fill_succeeds",
        "tests/io/stores/test_cache.py::test_concurrent_processes_fill_one_object_once_and_never_show_a_partial_file",
        "tests/io/stores/test_s3_compressed.py::test_two_ranks_of_a_node_stream_compressed_shards_through_one_cache",
        "tests/io/stores/test_streaming.py::test_killed_and_resumed_run_equals_an_uninterrupted_one",
        "tests/io/stores/test_streaming_pieces.py::test_a_process_killed_mid_epoch_resumes_from_its_checkpoint_and_delivers_each_sample_once",
        "tests/io/stores/test_http_and_index.py::test_the_index_goes_next_to_the_data_where_the_store_takes_writes_else_to_the_cache",
        "tests/io/stores/test_stores.py",
        "tests/io/test_index_auto.py::test_a_build_killed_midway_leaves_nothing_believed",
        "tests/io/test_index_auto.py::test_a_changed_shard_is_the_only_one_read_again",
        "tests/io/test_index_auto.py::test_a_wait_that_runs_out_builds_in_memory_and_writes_nothing",
        "tests/io/test_index_auto.py::test_eight_processes_starting_together_build_once",
        "tests/io/test_index_auto.py::test_the_first_loader_builds_the_index_and_the_next_reads_no_shard",
        "tests/io/test_index_memory.py::test_index_false_reads_each_shard_once",
        "tests/plan/test_resume.py::test_fingerprint_is_stable_across_processes",
        "tests/plan/test_streaming_resampled.py::test_a_two_billion_sample_streamed_epoch_plans_at_once_in_little_memory",
        "tests/test_cli.py::test_a_closed_pipe_is_not_a_traceback",
        "tests/test_cli.py::test_bench_demo_set_follows_count",
        "tests/test_cli.py::test_bench_eval_and_float_pipelines",
        "tests/test_cli.py::test_bench_profile_lists_only_stages_that_ran",
        "tests/test_cli.py::test_bench_streams_and_prints_throughput",
        "tests/test_cli.py::test_ctrl_c_is_one_line_with_exit_130",
        "tests/test_cli.py::test_doctor_is_a_command",
        "tests/test_cli.py::test_errors_are_one_line_with_exit_code_2",
        "tests/test_cli.py::test_help_is_plain_text_with_every_option_explained",
        "tests/test_cli.py::test_index_of_something_else_than_tar_shards_is_a_one_line_error",
        "tests/test_cli.py::test_index_writes_one_file_that_loaders_then_use",
        "tests/test_cli.py::test_inspect_names_an_index_built_in_memory_as_such",
        "tests/test_cli.py::test_inspect_reports_counts_classes_and_sizes",
        "tests/test_cli.py::test_make_dataset_converts_an_image_folder",
        "tests/test_cli.py::test_make_dataset_force_never_deletes_files_it_did_not_write",
        "tests/test_cli.py::test_make_dataset_refuses_a_used_folder_and_force_replaces_it",
        "tests/test_cli.py::test_make_dataset_writes_complete_shards",
        "tests/test_cli.py::test_nonsense_arguments_are_one_line_errors",
        "tests/test_cli.py::test_os_errors_are_one_line",
        "tests/test_cli.py::test_python_m_turbofeed_and_version",
        "tests/test_convert.py::test_cli_convert",
        "tests/repo/test_deps.py::test_import_turbofeed_without_simplejpeg_and_tqdm",
        "tests/test_doctor.py::test_a_torchvision_that_fails_to_import_is_named_with_its_error",
        "tests/test_doctor.py::test_cli_doctor_json",
        "tests/test_doctor.py::test_find_backend_names_a_backend_that_fails_to_import",
        "tests/test_doctor.py::test_native_decoder_off_names_the_variable",
        "tests/repo/test_examples.py::test_every_example_parses_its_arguments",
        "tests/repo/test_examples.py::test_lightning_ddp_example_splits_the_data",
        "tests/repo/test_examples.py::test_resnet50_example_trains_and_evaluates",
        "tests/repo/test_examples.py::test_slurm_script_passes_bash_syntax_check",
        "tests/repo/test_examples.py::test_slurm_script_passes_its_default_brace_pattern_intact",
        "tests/torch/test_frameworks.py",
        "tests/repo/test_gpu_check.py",
        "tests/repo/test_packaging.py::test_metadata_has_spdx_license_classifiers_and_keywords",
        "tests/repo/test_packaging.py::test_sdist_has_no_build_outputs_or_caches",
        "tests/repo/test_packaging.py::test_sdist_holds_every_file_of_the_repository",
        "tests/repo/test_packaging.py::test_the_sdists_tests_collect",
        "tests/test_plot.py::test_bench_plot_into_a_missing_folder_is_one_error_line",
        "tests/test_plot.py::test_bench_plot_writes_a_png",
        "tests/repo/test_public_api.py::test_a_torch_that_fails_to_import_also_names_the_extra",
        "tests/repo/test_public_api.py::test_import_and_dir_do_not_import_torch",
        "tests/repo/test_public_api.py::test_without_torch_the_torch_names_say_what_to_install",
        "tests/torch/test_ranks_default.py::test_a_given_pair_the_launcher_contradicts_is_used_with_one_warning",
        "tests/torch/test_ranks_default.py::test_rank_or_world_size_alone_is_refused_naming_the_other",
        "tests/torch/test_shutdown.py::test_ctrl_c_ends_the_process_promptly",
        "tests/torch/test_shutdown.py::test_exit_with_a_live_iterator_does_not_hang",
        "tests/io/stores/test_streaming_torchrun.py",
        "tests/base/test_threads.py::test_doctor_prints_the_choice_and_why",
        "tests/base/test_threads.py::test_one_cpu_of_affinity_gives_one_thread_and_an_explicit_number_wins",
        "tests/base/test_threads.py::test_the_ranks_of_a_node_share_its_cores",
        "tests/repo/test_tiers.py::test_collected_tests_carry_their_tiers_markers",
        "tests/torch/test_torch_args.py::test_dataset_keyword_and_the_arguments_with_nothing_to_do",
        "tests/torch/test_torchrun.py",
        "tests/repo/test_typing.py::test_a_misspelt_name_is_an_error_not_any",
        "tests/repo/test_typing.py::test_mypy_finds_no_errors_in_turbofeed",
        "tests/repo/test_typing.py::test_users_see_the_lazy_dataloader_as_its_class",
        "tests/repo/test_typing.py::test_users_see_the_pipeline_and_its_samples",
        "tests/repo/test_wheel.py",
        "tests/transforms/test_normalize.py::test_transforms_import_no_torch",
    ),
    "gpu": (  # the GPU path: tests/gpu (CPU stand-ins without a GPU), CUDA-only tests, the GPU check
        "tests/gpu/",
        "tests/engine/test_slots.py::test_pinned_slots_are_page_locked",
        "tests/gds/test_cuda.py",
        "tests/repo/test_gpu_check.py",
    ),
    "packaging": (  # an sdist or a wheel built, or installed into a fresh venv
        "tests/repo/test_gpu_check.py::test_wheels_check_accepts_what_the_machine_and_the_folder_cover",
        "tests/repo/test_gpu_check.py::test_wheels_check_names_a_requirement_nobody_brings",
        "tests/repo/test_gpu_check.py::test_wheels_check_refuses_two_versions_and_other_pythons",
        "tests/repo/test_gpu_check.py::test_wheels_over_budget_drop_kvikio_only_when_that_makes_them_fit",
        "tests/repo/test_gpu_check.py::test_the_install_takes_what_fits_and_each_env_command_has_a_timeout",
        "tests/repo/test_packaging.py",
        "tests/repo/test_wheel.py",
    ),
}


def key_of(relpath: str, nodeid: str) -> str:
    """``relpath::name`` of a collected test, its parametrization left out: what an entry
    of :data:`TIERS` matches (``relpath``: the file from the repository root, ``/``-separated)."""
    names = nodeid.split("::")[1:]
    if names:
        names[-1] = names[-1].split("[", 1)[0]
    return "::".join([relpath, *names])


def tiers_of(relpath: str, nodeid: str) -> list[str]:
    """The tiers whose entries match this test (sorted; empty: the fast tier)."""
    key = key_of(relpath, nodeid)
    found = []
    for tier, entries in TIERS.items():
        for entry in entries:
            if entry.endswith("/"):
                hit = relpath.startswith(entry)
            elif "::" in entry:
                hit = key == entry or key.startswith(entry + "::")
            else:
                hit = relpath == entry
            if hit:
                found.append(tier)
                break
    return sorted(found)


def _covering(relpath: str) -> set[str]:
    """Tiers every test under ``relpath`` (a file, or a folder ending in ``/``) is in: those
    with a folder entry above it, or an entry for that very file."""
    return {tier for tier, entries in TIERS.items()
            if any(relpath.startswith(e) if e.endswith("/") else relpath == e for e in entries)}


def _inside(relpath: str) -> set[str]:
    """Tiers that only some tests under ``relpath`` may be in (entries within it)."""
    return {tier for tier, entries in TIERS.items()
            if any(e.startswith(relpath) and e != relpath for e in entries)}


def leaves_out(relpath: str, expression: str) -> bool:
    """Whether ``-m expression`` deselects every test under ``relpath``, whichever of the
    tiers entries inside it add: then pytest need not even import the file (collection is a
    third of the fast tier's time). False when unsure, e.g. an expression naming a marker
    that is not a tier."""
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m parser
        compiled = Expression.compile(expression)
    except Exception:  # noqa: BLE001 - another pytest, or an expression pytest will report itself
        return False
    words = set(re.findall(r"[A-Za-z_][\w.]*", expression)) - {"and", "or", "not", "True", "False"}
    sure = _covering(relpath)
    if not sure or not words <= set(TIERS):
        return False
    extra = sorted(_inside(relpath) - sure)
    for picked in itertools.product((False, True), repeat=len(extra)):
        marked = sure | {tier for tier, on in zip(extra, picked) if on}
        if compiled.evaluate(lambda name, **kwargs: name in marked):
            return False
    return True
