// The Vulkan instance, physical device enumeration and what each one offers.
#include "vulkan/vk_instance.h"

#include <cstring>

namespace tensorpc::vulkan {
namespace {

constexpr const char* kNoDriver =
    "no Vulkan driver found (install a GPU's Vulkan driver, or mesa-vulkan-drivers for lavapipe on the CPU)";

const char* result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VkResult";
  }
}

bool has_extension(VkPhysicalDevice physical, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(physical, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> extensions(n);
  vkEnumerateDeviceExtensionProperties(physical, nullptr, &n, extensions.data());
  for (const VkExtensionProperties& e : extensions) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}

const char* type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "device";
  }
}

}  // namespace

Status vk_error(VkResult result, const std::string& what) {
  const std::string message = what + ": " + result_name(result) + " (" + std::to_string(static_cast<int>(result)) + ")";
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY) return out_of_memory(message);
  return internal_error(message);
}

StatusOr<std::shared_ptr<Instance>> Instance::create() {
  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "tensorpc";
  app.apiVersion = VK_API_VERSION_1_1;
  auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  const VkResult r = vkCreateInstance(&info, nullptr, &instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return not_found(kNoDriver);
  TENSORPC_VK_RETURN_IF_ERROR(r, "vkCreateInstance");
  return std::shared_ptr<Instance>(new Instance(instance));
}

Instance::~Instance() { vkDestroyInstance(instance_, nullptr); }

StatusOr<std::vector<VkPhysicalDevice>> Instance::physical_devices() const {
  uint32_t n = 0;
  TENSORPC_VK_RETURN_IF_ERROR(vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
  if (n == 0) return not_found(kNoDriver);
  std::vector<VkPhysicalDevice> devices(n);
  TENSORPC_VK_RETURN_IF_ERROR(vkEnumeratePhysicalDevices(instance_, &n, devices.data()), "vkEnumeratePhysicalDevices");
  devices.resize(n);
  return devices;
}

StatusOr<PhysicalDeviceFacts> facts_of(VkPhysicalDevice physical) {
  PhysicalDeviceFacts f;
  auto driver = vk_struct<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  auto maintenance3 =
      vk_struct<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  const bool has_driver_properties = has_extension(physical, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  maintenance3.pNext = has_driver_properties ? &driver : nullptr;
  auto subgroup = vk_struct<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  subgroup.pNext = &maintenance3;
  auto properties = vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  properties.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(physical, &properties);
  constexpr VkSubgroupFeatureFlags kShuffle = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  f.subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
                       (subgroup.supportedOperations & kShuffle) == kShuffle;
  f.name = properties.properties.deviceName;
  f.type = type_name(properties.properties.deviceType);
  f.limits = properties.properties.limits;
  f.max_memory_allocation = maintenance3.maxMemoryAllocationSize;
  f.driver = has_driver_properties ? std::string(driver.driverName) + " (" + driver.driverInfo + ")"
                                   : "driver version " + std::to_string(properties.properties.driverVersion);

  auto storage16 =
      vk_struct<VkPhysicalDevice16BitStorageFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
  auto features = vk_struct<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  features.pNext = &storage16;
  vkGetPhysicalDeviceFeatures2(physical, &features);
  f.storage_16bit = storage16.storageBuffer16BitAccess == VK_TRUE;
  f.memory_budget = has_extension(physical, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);

  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, families.data());
  for (uint32_t i = 0; i < n && f.compute_queue_family < 0; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) f.compute_queue_family = static_cast<int>(i);
  }
  if (f.compute_queue_family < 0) return unsupported(f.name + ": no queue family computes");

  VkPhysicalDeviceMemoryProperties memory;
  vkGetPhysicalDeviceMemoryProperties(physical, &memory);
  for (uint32_t i = 0; i < memory.memoryHeapCount; ++i) {
    if (memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      f.device_local_bytes += memory.memoryHeaps[i].size;
  }
  return f;
}

MemoryInfo device_local_memory(VkPhysicalDevice physical, const PhysicalDeviceFacts& facts, uint64_t allocated_here) {
  auto budget = vk_struct<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  auto memory = vk_struct<VkPhysicalDeviceMemoryProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  if (facts.memory_budget) memory.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(physical, &memory);
  MemoryInfo info;
  const VkPhysicalDeviceMemoryProperties& p = memory.memoryProperties;
  for (uint32_t i = 0; i < p.memoryHeapCount; ++i) {
    if (!(p.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
    info.total += p.memoryHeaps[i].size;
    if (facts.memory_budget) {
      const uint64_t budget_bytes = budget.heapBudget[i], used = budget.heapUsage[i];
      info.free += budget_bytes > used ? budget_bytes - used : 0;
    }
  }
  if (!facts.memory_budget) info.free = info.total > allocated_here ? info.total - allocated_here : 0;
  return info;
}

}  // namespace tensorpc::vulkan
